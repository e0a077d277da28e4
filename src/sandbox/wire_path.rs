//! Paths in the trampoline's JSON spec, exactly: a UTF-8 path as a string,
//! any other (a deny glob's match may be named in any bytes) as
//! `{"bytes": BASE64}`; used through `#[serde(with = ...)]`.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::protocol::Base64;

/// One path on the wire.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Wire {
    Text(String),
    Bytes { bytes: Base64 },
}

impl Wire {
    fn of(path: &Path) -> Wire {
        match path.to_str() {
            Some(text) => Wire::Text(text.to_owned()),
            None => Wire::Bytes { bytes: Base64(path.as_os_str().as_bytes().to_vec()) },
        }
    }

    fn path(self) -> PathBuf {
        match self {
            Wire::Text(text) => PathBuf::from(text),
            Wire::Bytes { bytes } => PathBuf::from(OsString::from_vec(bytes.0)),
        }
    }
}

/// A list of paths.
pub(crate) mod list {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(paths: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(paths.iter().map(|p| Wire::of(p)))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
        Ok(Vec::<Wire>::deserialize(d)?.into_iter().map(Wire::path).collect())
    }
}

/// A list of paths, or none.
pub(crate) mod optional_list {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        paths: &Option<Vec<PathBuf>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match paths {
            Some(paths) => s.serialize_some(&paths.iter().map(|p| Wire::of(p)).collect::<Vec<_>>()),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<PathBuf>>, D::Error> {
        let paths = Option::<Vec<Wire>>::deserialize(d)?;
        Ok(paths.map(|paths| paths.into_iter().map(Wire::path).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Both {
        #[serde(with = "list")]
        list: Vec<PathBuf>,
        #[serde(with = "optional_list")]
        optional: Option<Vec<PathBuf>>,
    }

    #[test]
    fn any_path_survives_the_spec() {
        let raw = PathBuf::from(OsString::from_vec(b"/w/s\xffcret.env".to_vec()));
        let both = Both { list: vec!["/w/a".into(), raw.clone()], optional: Some(vec![raw]) };
        let text = serde_json::to_string(&both).unwrap();
        assert_eq!(
            text,
            r#"{"list":["/w/a",{"bytes":"L3cvc/9jcmV0LmVudg=="}],"optional":[{"bytes":"L3cvc/9jcmV0LmVudg=="}]}"#
        );
        assert_eq!(serde_json::from_str::<Both>(&text).unwrap(), both);
        let none = Both { list: Vec::new(), optional: None };
        assert_eq!(
            serde_json::from_str::<Both>(&serde_json::to_string(&none).unwrap()).unwrap(),
            none
        );
    }
}
