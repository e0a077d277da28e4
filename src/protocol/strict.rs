//! JSON text into a `serde_json::Value`, refusing an object that names a key
//! twice. serde_json keeps the last of two equal keys, while another reader
//! (a proxy, a validator, a log) may keep the first: a message such as
//! `{"sandbox": {...restricted...}, "sandbox": {"mode": "none"}}` must not mean
//! one thing to them and another to the server.
//!
//! A message holds at most [`MAX_ELEMENTS`] array items and object entries:
//! a value costs far more memory parsed than written (a 58 MiB message of 5
//! million tiny env entries took 1.9 GB), so the count is what bounds it.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde::Deserializer;
use serde_json::{Map, Number, Value};

/// Array items and object entries one message may hold (all levels).
pub(crate) const MAX_ELEMENTS: usize = 262_144;

/// Parses `text` as one JSON value; a duplicate key, or more than
/// [`MAX_ELEMENTS`] items and entries, is an error naming it.
pub(crate) fn from_str(text: &str) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let elements = Cell::new(0);
    let value = Strict(&elements).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// A value, counting the elements of the whole message in the cell.
#[derive(Clone, Copy)]
struct Strict<'c>(&'c Cell<usize>);

impl Strict<'_> {
    fn count<E: serde::de::Error>(self) -> Result<(), E> {
        let count = self.0.get() + 1;
        self.0.set(count);
        if count > MAX_ELEMENTS {
            return Err(E::custom(format!(
                "the message holds more than {MAX_ELEMENTS} array items and object entries"
            )));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element_seed(self)? {
            self.count()?;
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(A::Error::custom(format!("duplicate key `{key}` in an object")));
            }
            self.count()?;
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_serde_json_does_and_duplicates_are_refused() {
        let text = r#"{"a":[1,-2,1.5,"s\n",true,null,{"b":{}}],"c":18446744073709551615}"#;
        assert_eq!(from_str(text).unwrap(), serde_json::from_str::<Value>(text).unwrap());
        let twice = r#"{"params":{"sandbox":{"mode":"restricted"},"sandbox":{"mode":"none"}}}"#;
        assert_eq!(
            from_str(twice).unwrap_err().to_string(),
            "duplicate key `sandbox` in an object at line 1 column 52"
        );
        assert!(from_str("{} x").is_err());
    }

    #[test]
    fn a_message_of_too_many_elements_is_refused() {
        let fits = format!("[{}0]", "0,".repeat(MAX_ELEMENTS - 1));
        assert!(from_str(&fits).is_ok());
        let over = format!(
            "{{\"env\":{{{}\"x\":\"\"}}}}",
            (0..MAX_ELEMENTS).map(|n| format!("\"k{n}\":\"\",")).collect::<String>()
        );
        let error = from_str(&over).unwrap_err().to_string();
        assert!(
            error.starts_with("the message holds more than 262144 array items and object entries"),
            "{error}"
        );
    }
}
