//! Names that are not UTF-8: the base64 twins of path parameters (`pathBase64`...) and of listed names.
//!
//! A path field is written `#[serde(flatten, with = "crate::protocol::names::path")]`:
//! it reads exactly one of `path` (a string) and `pathBase64` (the raw bytes),
//! and writes `path` when the path is UTF-8, `pathBase64` otherwise.

use std::path::{Path, PathBuf};

use crate::protocol::Base64;

/// The raw bytes of a name that is not UTF-8, for `fileNameBase64`.
pub(crate) fn base64_if_not_utf8(name: &[u8]) -> Option<Base64> {
    std::str::from_utf8(name).is_err().then(|| Base64(name.to_vec()))
}

/// A path from its raw bytes: exact on Unix; elsewhere (a client on
/// Windows naming a server's path) lossy where they are not UTF-8.
pub(crate) fn from_bytes(bytes: Vec<u8>) -> PathBuf {
    #[cfg(unix)]
    {
        PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(bytes))
    }
    #[cfg(not(unix))]
    {
        PathBuf::from(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// A path's raw bytes: exact on Unix; elsewhere its UTF-8 form (lossy).
pub(crate) fn to_bytes(path: &Path) -> std::borrow::Cow<'_, [u8]> {
    #[cfg(unix)]
    {
        std::borrow::Cow::Borrowed(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
    }
    #[cfg(not(unix))]
    {
        match path.to_string_lossy() {
            std::borrow::Cow::Borrowed(text) => std::borrow::Cow::Borrowed(text.as_bytes()),
            std::borrow::Cow::Owned(text) => std::borrow::Cow::Owned(text.into_bytes()),
        }
    }
}

fn to_base64(path: &Path) -> Base64 {
    Base64(to_bytes(path).into_owned())
}

macro_rules! twin {
    ($(#[$doc:meta])* $module:ident, $text:literal, $base64:literal) => {
        $(#[$doc])*
        pub(crate) mod $module {
            use std::path::PathBuf;

            use serde::de::Error as _;
            use serde::ser::SerializeMap as _;
            use serde::{Deserialize, Deserializer, Serializer};

            use crate::protocol::Base64;

            #[derive(Deserialize)]
            struct Twin {
                #[serde(rename = $text)]
                text: Option<PathBuf>,
                #[serde(rename = $base64)]
                base64: Option<Base64>,
            }

            pub(crate) fn serialize<S: Serializer>(path: &std::path::Path, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(1))?;
                match path.to_str() {
                    Some(text) => map.serialize_entry($text, text)?,
                    None => map.serialize_entry($base64, &super::to_base64(path))?,
                }
                map.end()
            }

            pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<PathBuf, D::Error> {
                match Twin::deserialize(deserializer)? {
                    Twin { text: Some(path), base64: None } => Ok(path),
                    Twin { text: None, base64: Some(bytes) } => Ok(super::from_bytes(bytes.0)),
                    Twin { text: Some(_), base64: Some(_) } => Err(D::Error::custom(concat!(
                        "give either `", $text, "` or `", $base64, "`, not both"
                    ))),
                    Twin { text: None, base64: None } => Err(D::Error::custom(concat!(
                        "missing field `", $text, "` (or `", $base64, "`)"
                    ))),
                }
            }
        }
    };
}

twin!(
    /// `path` / `pathBase64`.
    path, "path", "pathBase64"
);
twin!(
    /// `sourcePath` / `sourcePathBase64`.
    source_path, "sourcePath", "sourcePathBase64"
);
twin!(
    /// `destinationPath` / `destinationPathBase64`.
    destination_path, "destinationPath", "destinationPathBase64"
);

#[cfg(test)]
mod tests {
    use crate::protocol::{CopyParams, PathParams};

    #[test]
    fn paths_travel_as_text_or_base64() {
        let params: PathParams = serde_json::from_str(r#"{"pathBase64":"L3RtcC//"}"#).unwrap();
        assert_eq!(std::os::unix::ffi::OsStrExt::as_bytes(params.path.as_os_str()), b"/tmp/\xff");
        assert_eq!(serde_json::to_string(&params).unwrap(), r#"{"pathBase64":"L3RtcC//"}"#);
        let params: PathParams = serde_json::from_str(r#"{"path":"/a"}"#).unwrap();
        assert_eq!(serde_json::to_string(&params).unwrap(), r#"{"path":"/a"}"#);
        let both = serde_json::from_value::<PathParams>(
            serde_json::json!({"path": "/a", "pathBase64": "L2E="}),
        );
        assert_eq!(both.unwrap_err().to_string(), "give either `path` or `pathBase64`, not both");
        let neither = serde_json::from_value::<CopyParams>(serde_json::json!({"sourcePath": "/a"}));
        assert_eq!(
            neither.unwrap_err().to_string(),
            "missing field `destinationPath` (or `destinationPathBase64`)"
        );
    }
}
