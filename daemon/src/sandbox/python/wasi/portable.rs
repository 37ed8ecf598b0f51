//! The host's resource entries as plain data, to save a template's resource tables on disk
//! beside its snapshot (see `sandbox::stored`): every kind of entry the host hands the guest is
//! an index into the library, a position, or a stream's name, so it is saved as such.

use serde::{Deserialize, Serialize};

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
        }
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        match portable {
            Portable::Stdin => Some(Input::Stdin),
            _ => super::files::FileStream::from_portable(portable).map(Input::File),
        }
    }
}

impl ToPortable for Output {
    fn to_portable(&self) -> Portable {
        let stream = match self.0 {
            Stream::Stdout => 1,
            Stream::Stderr => 2,
        };
        Portable::Output { stream }
    }
    fn from_portable(portable: &Portable) -> Option<Self> {
        match portable {
            Portable::Output { stream: 1 } => Some(Output(Stream::Stdout)),
            Portable::Output { stream: 2 } => Some(Output(Stream::Stderr)),
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
        let out = round_trip(&Output(Stream::Stderr)).unwrap();
        assert_eq!(out.0, Stream::Stderr);
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
