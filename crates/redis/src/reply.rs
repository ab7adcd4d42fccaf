//! The engines' answers, read from the bytes Redis sent: the module answers
//! one bulk string of words separated by single spaces, the scripts an
//! array of strings; both become [`Words`], which the store decodes into
//! decisions without making a string of any word.

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};
use tollgate_core::{BanRefusal, Decision, StoreError};

/// An engine's reply: its words, each separated from the next by one space
/// (no word holds a space: they are numbers and marks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Words {
    text: Vec<u8>,
}

impl Words {
    /// The words of `text`.
    #[cfg(test)]
    pub(crate) fn new(text: &str) -> Words {
        Words {
            text: text.as_bytes().to_vec(),
        }
    }

    /// The words, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.text.split(|&b| b == b' ')
    }

    /// How many words there are.
    pub(crate) fn len(&self) -> usize {
        1 + self.text.iter().filter(|&&b| b == b' ').count()
    }

    /// The `i`th word.
    pub(crate) fn get(&self, i: usize) -> Option<&[u8]> {
        self.iter().nth(i)
    }

    /// The `i`th word as a number.
    pub(crate) fn number(&self, i: usize) -> Result<u64, StoreError> {
        self.get(i)
            .and_then(parse)
            .ok_or_else(|| malformed("a number was expected"))
    }
}

impl FromRedisValue for Words {
    fn from_redis_value(value: Value) -> Result<Words, ParsingError> {
        match value {
            // The module's answer, taken as it is.
            Value::BulkString(text) => Ok(Words { text }),
            Value::SimpleString(text) => Ok(Words {
                text: text.into_bytes(),
            }),
            // The scripts' answer, joined.
            Value::Array(items) => {
                let mut text = Vec::with_capacity(items.len() * 8);
                for (i, item) in items.into_iter().enumerate() {
                    if i > 0 {
                        text.push(b' ');
                    }
                    match item {
                        Value::BulkString(word) if !word.contains(&b' ') => {
                            text.extend_from_slice(&word)
                        }
                        Value::Int(n) => text.extend_from_slice(n.to_string().as_bytes()),
                        other => return Err(format!("a word was expected, not {other:?}").into()),
                    }
                }
                Ok(Words { text })
            }
            other => Err(format!("words were expected, not {other:?}").into()),
        }
    }

    fn from_redis_value_ref(value: &Value) -> Result<Words, ParsingError> {
        Words::from_redis_value(value.clone())
    }
}

/// A reply that does not have the engines' shape.
pub(crate) fn malformed(what: &str) -> StoreError {
    StoreError::Unavailable(format!("unexpected reply from the Redis script: {what}"))
}

/// A decimal number of at most 20 digits.
fn parse(word: &[u8]) -> Option<u64> {
    std::str::from_utf8(word).ok()?.parse().ok()
}

/// `count` decisions of seven words each, after the first `start` words.
pub(crate) fn decisions(
    reply: &Words,
    start: usize,
    count: usize,
) -> Result<Vec<Decision>, StoreError> {
    if reply.len() != start + 7 * count {
        return Err(malformed("wrong length"));
    }
    let mut words = reply.iter().skip(start);
    let mut next = || words.next().ok_or_else(|| malformed("wrong length"));
    let number = |word: &[u8]| parse(word).ok_or_else(|| malformed("a number was expected"));
    let mut decisions = Vec::with_capacity(count);
    for _ in 0..count {
        let allowed = next()? == b"1";
        let limit = number(next()?)?;
        let remaining = number(next()?)?;
        let retry_after = Duration::from_nanos(number(next()?)?);
        let reset_after = Duration::from_nanos(number(next()?)?);
        let delay = Duration::from_nanos(number(next()?)?);
        // The lease's place carries a ban's mark when a ban refused.
        let (lease, ban) = match next()? {
            b"" => (None, None),
            b"s" => (None, Some(BanRefusal::Started)),
            b"b" => (None, Some(BanRefusal::InForce)),
            word => (Some(number(word)?), None),
        };
        decisions.push(Decision {
            allowed,
            limit,
            remaining,
            retry_after,
            reset_after,
            delay,
            lease,
            degraded: false,
            asynchronous: false,
            ban,
        });
    }
    Ok(decisions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    #[test]
    fn both_engines_replies_become_the_same_words() {
        let module = Words::from_redis_value(Value::BulkString(b"1 1 0  s".to_vec())).unwrap();
        let script = Words::from_redis_value(Value::Array(vec![
            Value::BulkString(b"1".to_vec()),
            Value::Int(1),
            Value::BulkString(b"0".to_vec()),
            Value::BulkString(Vec::new()),
            Value::BulkString(b"s".to_vec()),
        ]))
        .unwrap();
        assert_eq!(module, script);
        assert_eq!(module.len(), 5);
        let words: Vec<&[u8]> = module.iter().collect();
        assert_eq!(words, [&b"1"[..], b"1", b"0", b"", b"s"]);
        assert_eq!(module.number(2).unwrap(), 0);
        assert!(module.number(3).is_err() && module.number(5).is_err());
        assert!(Words::from_redis_value(Value::Nil).is_err());
        let spaced = Value::Array(vec![Value::BulkString(b"a b".to_vec())]);
        assert!(Words::from_redis_value(spaced).is_err());
    }

    #[test]
    fn decisions_are_read_from_the_words() {
        let reply = Words::new("1 1 1 9 0 100 0  0 10 0 5 7 0 42 0 10 0 5 7 0 b");
        let decisions = decisions(&reply, 1, 3).unwrap();
        assert_eq!(
            decisions[0],
            Decision {
                allowed: true,
                limit: 1,
                remaining: 9,
                retry_after: Duration::ZERO,
                reset_after: Duration::from_nanos(100),
                delay: Duration::ZERO,
                lease: None,
                degraded: false,
                asynchronous: false,
                ban: None,
            }
        );
        assert!(!decisions[1].allowed);
        assert_eq!(decisions[1].retry_after, Duration::from_nanos(5));
        assert_eq!(decisions[1].lease, Some(42));
        assert_eq!(decisions[2].ban, Some(BanRefusal::InForce));
        assert!(super::decisions(&reply, 1, 2).is_err(), "wrong length");
        let garbage = Words::new("1 0 x 9 0 100 0 ");
        assert!(super::decisions(&garbage, 1, 1).is_err());
        let huge = Words::new("1 18446744073709551616 1 1 1 1 1");
        assert!(super::decisions(&huge, 0, 1).is_err());
    }
}
