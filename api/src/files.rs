//! Files a program is given and gives back: its working directory's contents on the wire.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use schemars::JsonSchema;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// Files by path in the program's working directory (`data.csv`, `out/report.txt`).
pub type FileMap = BTreeMap<String, FileData>;

/// A file's content: UTF-8 text as a JSON string, or any bytes as `{"base64": "..."}`
/// (standard alphabet, padded). The daemon answers with text whenever the bytes are UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum FileData {
    /// The file's bytes are this text, in UTF-8.
    Text(String),
    /// The file's bytes, base64-encoded.
    Binary {
        /// The bytes, in standard base64 with padding.
        base64: String,
    },
}

impl FileData {
    /// The content of a file holding `bytes`: text if they are UTF-8, base64 otherwise.
    pub fn from_bytes(bytes: Vec<u8>) -> FileData {
        match String::from_utf8(bytes) {
            Ok(text) => FileData::Text(text),
            Err(e) => FileData::Binary {
                base64: STANDARD.encode(e.into_bytes()),
            },
        }
    }

    /// The file's bytes; an error says why base64 does not decode.
    pub fn to_bytes(&self) -> Result<Vec<u8>, String> {
        match self {
            FileData::Text(text) => Ok(text.as_bytes().to_vec()),
            FileData::Binary { base64 } => STANDARD
                .decode(base64)
                .map_err(|e| format!("its base64 does not decode: {e}")),
        }
    }

    /// How many bytes the file holds (for base64, as encoded, an upper bound).
    pub fn encoded_len(&self) -> usize {
        match self {
            FileData::Text(text) => text.len(),
            FileData::Binary { base64 } => base64.len() / 4 * 3,
        }
    }
}

/// Read by hand so that a wrong shape says what is expected (an untagged enum would only say
/// that nothing matched).
impl<'de> Deserialize<'de> for FileData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FileDataVisitor)
    }
}

struct FileDataVisitor;

impl<'de> Visitor<'de> for FileDataVisitor {
    type Value = FileData;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(r#"a file's content: a string of text, or {"base64": "..."}"#)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<FileData, E> {
        Ok(FileData::Text(text.to_owned()))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<FileData, E> {
        Ok(FileData::Text(text))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FileData, A::Error> {
        let mut base64 = None;
        while let Some(key) = map.next_key::<String>()? {
            if key != "base64" {
                return Err(de::Error::unknown_field(&key, &["base64"]));
            }
            if base64.is_some() {
                return Err(de::Error::duplicate_field("base64"));
            }
            base64 = Some(map.next_value::<String>()?);
        }
        let base64 = base64.ok_or_else(|| de::Error::missing_field("base64"))?;
        Ok(FileData::Binary { base64 })
    }
}

/// One file of a session's working directory, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileInfo {
    /// Its path in the working directory.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
}

/// Body of `GET /v1/sessions/{id}/files`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FileList {
    /// The session's files, by path.
    pub files: Vec<FileInfo>,
}

/// One change to a session's working directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum FileChange {
    /// Writes the file `path`, replacing it, making its directories.
    Write {
        /// The file's path in the working directory (`data.csv`, `in/a.json`).
        path: String,
        /// The file's content.
        data: FileData,
    },
    /// Removes the file or directory `path`, with everything in it.
    Remove {
        /// The path in the working directory.
        path: String,
    },
    /// Renames `from` to `to`, replacing a file there (or an empty directory, for a
    /// directory), as POSIX's `rename` does. The directory `to` is in must exist.
    Move {
        /// The path renamed.
        from: String,
        /// Its new path.
        to: String,
    },
}

/// Body of `POST /v1/sessions/{id}/files`: changes made in order, all or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileChanges {
    /// The changes, made in order; the first refused refuses them all.
    pub changes: Vec<FileChange>,
}

/// Answer of `POST /v1/sessions/{id}/files`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FilesChanged {
    /// The checkpoint the changes made: the session's state with its files as changed (roll
    /// back to the one before to undo them).
    pub checkpoint: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_base64_read_and_write_back() {
        let files: FileMap =
            serde_json::from_str(r#"{"a.txt": "héllo", "b.bin": {"base64": "AP8="}}"#).unwrap();
        assert_eq!(files["a.txt"].to_bytes().unwrap(), "héllo".as_bytes());
        assert_eq!(files["b.bin"].to_bytes().unwrap(), [0, 255]);
        assert_eq!(FileData::from_bytes(vec![0, 255]), files["b.bin"]);
        assert_eq!(
            FileData::from_bytes(b"text".to_vec()),
            FileData::Text("text".into())
        );
        let json = serde_json::to_string(&files).unwrap();
        assert_eq!(json, r#"{"a.txt":"héllo","b.bin":{"base64":"AP8="}}"#);
    }

    #[test]
    fn wrong_shapes_say_what_is_expected() {
        for (body, says) in [
            (r#"{"a": 5}"#, "a string of text, or {\"base64\""),
            (r#"{"a": {"hex": "00"}}"#, "unknown field `hex`"),
            (r#"{"a": {}}"#, "missing field `base64`"),
        ] {
            let e = serde_json::from_str::<FileMap>(body).unwrap_err();
            assert!(e.to_string().contains(says), "{body}: {e}");
        }
        let bad = FileData::Binary {
            base64: "!!".into(),
        };
        assert!(bad.to_bytes().unwrap_err().contains("base64"));
    }
}
