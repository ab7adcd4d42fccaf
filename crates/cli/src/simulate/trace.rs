//! The trace format: one JSON object per line, in non-decreasing time order.

use serde::Deserialize;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceRequest {
    /// When the request arrives, in ms since the epoch (or any fixed origin).
    pub at_ms: u64,
    /// The key it is counted under.
    pub key: String,
    /// Its cost; 1 when absent, 0 for a peek.
    #[serde(default = "unit_cost")]
    pub cost: u64,
}

fn unit_cost() -> u64 {
    1
}

/// Why a trace line was refused; every message names the line.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The line is not a valid request object.
    #[error("line {line}: {reason}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The line goes back in time.
    #[error("line {line}: at_ms {at_ms} is before the previous request's {previous} (the trace must be in non-decreasing at_ms order)")]
    OutOfOrder {
        /// 1-based line number.
        line: usize,
        /// Its time.
        at_ms: u64,
        /// The time of the line before it.
        previous: u64,
    },
}

/// Parses trace lines and enforces their order.
#[derive(Debug, Default)]
pub struct TraceReader {
    line: usize,
    previous: Option<u64>,
}

impl TraceReader {
    /// Parses the next line. Blank lines are skipped (`Ok(None)`) but counted.
    pub fn parse(&mut self, text: &str) -> Result<Option<TraceRequest>, TraceError> {
        self.line += 1;
        if text.trim().is_empty() {
            return Ok(None);
        }
        let request: TraceRequest =
            serde_json::from_str(text).map_err(|e| TraceError::Malformed {
                line: self.line,
                reason: e.to_string(),
            })?;
        if let Some(previous) = self.previous.filter(|&p| request.at_ms < p) {
            return Err(TraceError::OutOfOrder {
                line: self.line,
                at_ms: request.at_ms,
                previous,
            });
        }
        self.previous = Some(request.at_ms);
        Ok(Some(request))
    }

    /// The number of the line parsed last (1-based).
    pub fn line(&self) -> usize {
        self.line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_defaults_to_one_and_order_is_enforced() {
        let mut reader = TraceReader::default();
        let first = reader
            .parse(r#"{"at_ms": 5, "key": "a"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(first.cost, 1);
        assert!(reader.parse("   ").unwrap().is_none());
        let same_time = reader
            .parse(r#"{"at_ms": 5, "key": "b", "cost": 0}"#)
            .unwrap();
        assert_eq!(same_time.map(|r| r.cost), Some(0));
        let err = reader
            .parse(r#"{"at_ms": 4, "key": "a"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("line 4:") && err.contains("at_ms 4"),
            "{err}"
        );
    }

    #[test]
    fn malformed_lines_are_named() {
        let mut reader = TraceReader::default();
        for bad in [
            r#"{"key": "a"}"#,
            "not json",
            r#"{"at_ms": 1, "key": "a", "colour": 2}"#,
            r#"{"at_ms": -1, "key": "a"}"#,
        ] {
            let err = reader.parse(bad).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("line {}:", reader.line())),
                "{err}"
            );
        }
    }
}
