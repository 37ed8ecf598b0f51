//! The host's resource entries as plain data, to save a template's resource tables on disk
//! beside its snapshot (see `sandbox::stored`): every kind of entry the host hands the guest is
//! an index into the library, a position, or a stream's name, so it is saved as such.

use serde::{Deserialize, Serialize};

use std::sync::atomic::{AtomicU64, Ordering};

use super::work::{WorkReader, WorkWriter};
use super::{Input, IoError, Network, Never, Output, Pollable};
use crate::sandbox::guest::Stream;

/// One resource entry, as saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Portable {
    /// A pollable. One that waited for a point of the monotonic clock is saved ready: the
    /// template is saved after its calls returned, so that point has passed.
    Pollable,
    Stdin,
    /// A library file being read: its node, and where the next read starts.
    File {
        node: usize,
        at: u64,
    },
    /// stdout (1) or stderr (2).
    Output {
        stream: u8,
    },
    IoError,
    Network,
    /// An open file or directory of the library.
    Descriptor {
        node: usize,
    },
    /// A directory being listed, and the index of its next entry.
    Listing {
        node: usize,
        next: usize,
    },
    /// An open file or directory of the working directory: its path.
    WorkDescriptor {
        path: String,
    },
    /// A file of the working directory being read: its path, and where the next read starts.
    WorkFile {
        path: String,
        at: u64,
    },
    /// A file of the working directory being written: its path, and where the next write
    /// goes (None: at its end).
    WorkOutput {
        path: String,
        at: Option<u64>,
    },
    /// A directory of the working directory being listed: its entries (name, whether a
    /// directory), and the index of the next.
    WorkListing {
        entries: Vec<(String, bool)>,
        next: usize,
    },
}

impl Portable {
    /// The library node the entry names, if it names one.
    pub fn node(&self) -> Option<usize> {
        match *self {
            Portable::File { node, .. }
            | Portable::Descriptor { node }
            | Portable::Listing { node, .. } => Some(node),
            _ => None,
        }
    }
}

/// A kind of resource entry that can be saved and read back.
pub trait ToPortable: Sized {
    fn to_portable(&self) -> Portable;
    /// None when `portable` is another kind of entry.
    fn from_portable(portable: &Portable) -> Option<Self>;
}

impl ToPortable for Never {
    fn to_portable(&self) -> Portable {
        match *self {}
    }
    fn from_portable(_: &Portable) -> Option<Self> {
        None
    }
}

impl ToPortable for Pollable {
    fn to_portable(&self) -> Portable {
        Portable::Pollable
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        matches!(portable, Portable::Pollable).then_some(Pollable::Ready)
    }
}

impl ToPortable for Input {
    fn to_portable(&self) -> Portable {
        match self {
            Input::Stdin => Portable::Stdin,
            Input::File(file) => file.to_portable(),
            Input::Work(file) => Portable::WorkFile {
                path: file.path.clone(),
                at: file.at.load(Ordering::Relaxed),
            },
        }
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        match portable {
            Portable::Stdin => Some(Input::Stdin),
            Portable::WorkFile { path, at } => Some(Input::Work(Box::new(WorkReader {
                path: path.clone(),
                at: AtomicU64::new(*at),
            }))),
            _ => super::files::FileStream::from_portable(portable).map(Input::File),
        }
    }
}

impl ToPortable for Output {
    fn to_portable(&self) -> Portable {
        match self {
            Output::Std(Stream::Stdout) => Portable::Output { stream: 1 },
            Output::Std(Stream::Stderr) => Portable::Output { stream: 2 },
            Output::File(file) => Portable::WorkOutput {
                path: file.path.clone(),
                at: file.at.as_ref().map(|at| at.load(Ordering::Relaxed)),
            },
        }
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        match portable {
            Portable::Output { stream: 1 } => Some(Output::Std(Stream::Stdout)),
            Portable::Output { stream: 2 } => Some(Output::Std(Stream::Stderr)),
            Portable::WorkOutput { path, at } => Some(Output::File(Box::new(WorkWriter {
                path: path.clone(),
                at: at.map(AtomicU64::new),
            }))),
            _ => None,
        }
    }
}

impl ToPortable for IoError {
    fn to_portable(&self) -> Portable {
        Portable::IoError
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        matches!(portable, Portable::IoError).then_some(IoError)
    }
}

impl ToPortable for Network {
    fn to_portable(&self) -> Portable {
        Portable::Network
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        matches!(portable, Portable::Network).then_some(Network)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: ToPortable>(value: &T) -> Option<T> {
        let json = serde_json::to_string(&value.to_portable()).unwrap();
        T::from_portable(&serde_json::from_str(&json).unwrap())
    }

    #[test]
    fn entries_read_back_as_what_was_saved() {
        let out = round_trip(&Output::Std(Stream::Stderr)).unwrap();
        assert!(matches!(out, Output::Std(Stream::Stderr)));
        let file = Output::File(Box::new(WorkWriter {
            path: "out/a.txt".into(),
            at: Some(AtomicU64::new(7)),
        }));
        let Some(Output::File(back)) = round_trip(&file) else {
            panic!("a file being written reads back as one");
        };
        assert_eq!(back.path, "out/a.txt");
        assert_eq!(back.at.map(|at| at.into_inner()), Some(7));
        assert!(matches!(round_trip(&Input::Stdin), Some(Input::Stdin)));
        let at = Pollable::At(std::time::Instant::now());
        assert!(matches!(round_trip(&at), Some(Pollable::Ready)));
        assert!(round_trip(&IoError).is_some());
        assert!(round_trip(&Network).is_some());
    }

    #[test]
    fn an_entry_of_another_kind_or_stream_is_refused() {
        assert!(Output::from_portable(&Portable::Stdin).is_none());
        assert!(Output::from_portable(&Portable::Output { stream: 7 }).is_none());
        assert!(Pollable::from_portable(&Portable::Network).is_none());
        assert!(Never::from_portable(&Portable::Pollable).is_none());
        assert!(Input::from_portable(&Portable::Descriptor { node: 0 }).is_none());
    }
}
