//! Resource limits of a started process tree (Part B): what `process/start`
//! asks for, what `process/list` shows, and which limit ended a process.

use serde::{Deserialize, Deserializer, Serialize};

/// The least `memoryBytes` a start may ask for: below this nothing execs.
pub const MIN_MEMORY_BYTES: u64 = 1024 * 1024;
/// The most `memoryBytes`: the largest integer a JSON client reads exactly.
pub const MAX_MEMORY_BYTES: u64 = 1 << 53;
/// The most `processes`: Linux's own ceiling on pids (`PID_MAX_LIMIT`).
pub const MAX_PROCESSES: u64 = 4 * 1024 * 1024;
/// The most `cpuPercent`: a thousand CPUs.
pub const MAX_CPU_PERCENT: u64 = 100_000;

/// Limits on a started process and all its descendants together (Part B).
/// Each is optional; a server's defaults (`--limit-memory`,
/// `--limit-processes`, `--limit-cpu`) fill in the ones a start leaves out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct ProcessLimits {
    /// Memory of the whole tree, in bytes (at least 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "memory_bytes")]
    pub memory_bytes: Option<u64>,
    /// Processes and threads the tree holds at once; a fork beyond fails with EAGAIN.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "processes")]
    pub processes: Option<u64>,
    /// CPU of the whole tree as a share of one CPU: 100 is one core, 250 two and a half.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "cpu_percent")]
    pub cpu_percent: Option<u64>,
}

impl ProcessLimits {
    /// Limits with these values (None: the server's default, if any).
    pub const fn new(
        memory_bytes: Option<u64>,
        processes: Option<u64>,
        cpu_percent: Option<u64>,
    ) -> ProcessLimits {
        ProcessLimits { memory_bytes, processes, cpu_percent }
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self.memory_bytes.is_none() && self.processes.is_none() && self.cpu_percent.is_none()
    }
}

/// Which limit ended a process (`process/exited`'s `limit`, Part B).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum LimitHit {
    /// The tree reached `memoryBytes` and the kernel killed a process of it.
    Memory,
}

/// One limit's field name and its range, for the checks and their messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    pub(crate) name: &'static str,
    pub(crate) min: u64,
    pub(crate) max: u64,
}

pub(crate) const MEMORY: Field =
    Field { name: "memoryBytes", min: MIN_MEMORY_BYTES, max: MAX_MEMORY_BYTES };
pub(crate) const PROCESSES: Field = Field { name: "processes", min: 1, max: MAX_PROCESSES };
pub(crate) const CPU: Field = Field { name: "cpuPercent", min: 1, max: MAX_CPU_PERCENT };

impl Field {
    /// The value if it is an integer in range, else a message naming the field.
    pub(crate) fn check(&self, value: &serde_json::Number) -> Result<u64, String> {
        match value.as_u64() {
            Some(n) if (self.min..=self.max).contains(&n) => Ok(n),
            _ => Err(format!(
                "limits.{} must be an integer from {} to {}, not {value}",
                self.name, self.min, self.max
            )),
        }
    }
}

fn limit<'de, D: Deserializer<'de>>(
    field: Field,
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Number(number)) => {
            field.check(&number).map(Some).map_err(serde::de::Error::custom)
        }
        Some(other) => Err(serde::de::Error::custom(format!(
            "limits.{} must be an integer from {} to {}, not {}",
            field.name,
            field.min,
            field.max,
            super::json_kind(&other)
        ))),
    }
}

/// `limits` of `process/start`: an object of known members, or null. A
/// misspelled member is refused, never read as "no limit".
pub(crate) fn object<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<ProcessLimits>, D::Error> {
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(value @ serde_json::Value::Object(_)) => {
            serde_json::from_value(value).map(Some).map_err(|e| {
                let message = e.to_string();
                let named = message.starts_with("limits.");
                serde::de::Error::custom(if named { message } else { format!("limits: {message}") })
            })
        }
        Some(other) => Err(serde::de::Error::custom(format!(
            "limits must be an object of memoryBytes, processes and cpuPercent, not {}",
            super::json_kind(&other)
        ))),
    }
}

fn memory_bytes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    limit(MEMORY, deserializer)
}

fn processes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    limit(PROCESSES, deserializer)
}

fn cpu_percent<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    limit(CPU, deserializer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<ProcessLimits, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn limits_are_positive_integers_in_range() {
        assert_eq!(
            parse(r#"{"memoryBytes":67108864,"processes":32,"cpuPercent":250}"#),
            Ok(ProcessLimits::new(Some(64 << 20), Some(32), Some(250)))
        );
        assert_eq!(parse("{}"), Ok(ProcessLimits::default()));
        assert_eq!(parse(r#"{"processes":null}"#), Ok(ProcessLimits::default()));
        let refused = [
            (r#"{"processes":0}"#, "limits.processes must be an integer from 1 to 4194304, not 0"),
            (r#"{"processes":-3}"#, "limits.processes must be an integer from 1 to 4194304, not -3"),
            (r#"{"cpuPercent":2.5}"#, "limits.cpuPercent must be an integer from 1 to 100000, not 2.5"),
            (r#"{"cpuPercent":100001}"#, "limits.cpuPercent must be an integer from 1 to 100000, not 100001"),
            (r#"{"memoryBytes":1000}"#, "limits.memoryBytes must be an integer from 1048576 to 9007199254740992, not 1000"),
            (r#"{"memoryBytes":"1G"}"#, "limits.memoryBytes must be an integer from 1048576 to 9007199254740992, not a string"),
            (r#"{"memoryBytes":1e30}"#, "limits.memoryBytes must be an integer from 1048576 to 9007199254740992, not 1e+30"),
        ];
        for (json, message) in refused {
            let error = parse(json).expect_err(json);
            assert!(error.starts_with(message), "{json}: {error}");
        }
    }

    #[test]
    fn limits_are_an_object_of_known_members() {
        #[derive(Debug, serde::Deserialize)]
        struct Start {
            #[serde(default, deserialize_with = "object")]
            limits: Option<ProcessLimits>,
        }
        let parse = |json: &str| {
            serde_json::from_str::<Start>(json).map(|s| s.limits).map_err(|e| e.to_string())
        };
        assert_eq!(parse(r#"{"limits":null}"#), Ok(None));
        assert_eq!(
            parse(r#"{"limits":{"processes":3}}"#),
            Ok(Some(ProcessLimits::new(None, Some(3), None)))
        );
        let misspelled = parse(r#"{"limits":{"memoryByte":1048576}}"#).unwrap_err();
        assert!(misspelled.starts_with("limits: unknown field `memoryByte`, expected one of `memoryBytes`, `processes`, `cpuPercent`"), "{misspelled}");
        for json in [r#"{"limits":[67108864,32]}"#, r#"{"limits":[]}"#, r#"{"limits":5}"#] {
            let error = parse(json).unwrap_err();
            assert!(
                error.starts_with(
                    "limits must be an object of memoryBytes, processes and cpuPercent, not "
                ),
                "{json}: {error}"
            );
        }
    }

    #[test]
    fn a_limit_hit_is_named_in_lower_case() {
        assert_eq!(serde_json::to_string(&LimitHit::Memory).ok().as_deref(), Some("\"memory\""));
    }
}
