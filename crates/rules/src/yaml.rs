//! A small YAML tree with a line and column on every node, built from
//! saphyr-parser's events, bounded in depth and in size.
//!
//! This module owns turning text into [`Node`]s; it knows nothing of rules.
//! Scalars keep their source text and whether they were plain (unquoted),
//! so the schema in `parse` can apply YAML's (1.1-compatible) meanings of
//! `null`, `true` and numbers where, and only where, a field expects them.
//! Mapping keys are kept in order, duplicates included, so `parse` can
//! report a duplicate at its own line.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use crate::error::{ErrorKind, Location};

/// The deepest nesting of mappings and sequences a rules file may have.
/// A descriptor level costs two (its list and its mapping), so this allows
/// about 30 levels of nested descriptors.
pub const MAX_DEPTH: usize = 64;

/// The most nodes a rules file may expand to (aliases count every time
/// they are used), so that a small file cannot expand into a huge tree.
pub const MAX_NODES: usize = 2_000_000;

/// One YAML node and where it starts.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) at: Location,
    pub(crate) value: Value,
}

/// The three kinds of YAML node.
#[derive(Debug, Clone)]
pub(crate) enum Value {
    /// A scalar's text; `plain` when it was written without quotes or block
    /// markers (only plain scalars can mean `null`, `true` or a number).
    Scalar {
        text: String,
        plain: bool,
    },
    Sequence(Vec<Node>),
    /// Keys in document order, duplicates kept.
    Mapping(Vec<(Node, Node)>),
}

impl Node {
    /// Whether this is YAML's null (`~`, `null`, or nothing at all).
    pub(crate) fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar { text, plain: true }
            if matches!(text.as_str(), "" | "~" | "null" | "Null" | "NULL"))
    }

    /// A short description of the node's kind, for error messages.
    pub(crate) fn describe(&self) -> String {
        match &self.value {
            Value::Scalar { text, .. } if self.is_null() && text.is_empty() => "nothing".into(),
            Value::Scalar { text, .. } => format!("{text:?}"),
            Value::Sequence(_) => "a list".into(),
            Value::Mapping(_) => "a mapping".into(),
        }
    }
}

/// A failure while building the tree.
pub(crate) type TreeError = (Option<Location>, ErrorKind);

fn location(span: &Span) -> Location {
    Location {
        line: span.start.line(),
        column: span.start.col() + 1,
    }
}

/// A node being built: a sequence or mapping still open.
enum Open {
    Sequence {
        at: Location,
        anchor: usize,
        items: Vec<Node>,
    },
    Mapping {
        at: Location,
        anchor: usize,
        entries: Vec<(Node, Node)>,
        key: Option<Node>,
    },
}

/// An anchored node: a copy to hand out for each alias, with its size and height.
struct Anchored {
    node: Node,
    size: usize,
    height: usize,
}

struct Builder {
    stack: Vec<Open>,
    /// Node count and height of each open container's finished children.
    sizes: Vec<(usize, usize)>,
    anchors: HashMap<usize, Anchored>,
    nodes: usize,
    root: Option<Node>,
    documents: usize,
}

/// Parses `text` into its single document's root node (`None` for an empty
/// document).
pub(crate) fn parse(text: &str) -> Result<Option<Node>, TreeError> {
    let mut builder = Builder {
        stack: Vec::new(),
        sizes: Vec::new(),
        anchors: HashMap::new(),
        nodes: 0,
        root: None,
        documents: 0,
    };
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| {
            let at = Location {
                line: e.marker().line(),
                column: e.marker().col() + 1,
            };
            (Some(at), ErrorKind::Syntax(e.info().to_string()))
        })?;
        builder.on_event(event, &span)?;
    }
    Ok(builder.root)
}

impl Builder {
    fn on_event(&mut self, event: Event<'_>, span: &Span) -> Result<(), TreeError> {
        let at = location(span);
        match event {
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err((Some(at), ErrorKind::SeveralDocuments));
                }
            }
            Event::Scalar(text, style, anchor, _tag) => {
                let node = Node {
                    at,
                    value: Value::Scalar {
                        text: text.into_owned(),
                        plain: style == ScalarStyle::Plain,
                    },
                };
                self.finish(node, anchor, 1, 0)?;
            }
            Event::SequenceStart(anchor, _) => self.open(
                at,
                Open::Sequence {
                    at,
                    anchor,
                    items: Vec::new(),
                },
            )?,
            Event::MappingStart(anchor, _) => self.open(
                at,
                Open::Mapping {
                    at,
                    anchor,
                    entries: Vec::new(),
                    key: None,
                },
            )?,
            Event::SequenceEnd | Event::MappingEnd => self.close()?,
            Event::Alias(id) => {
                let Some(anchored) = self.anchors.get(&id) else {
                    return Err((Some(at), ErrorKind::UnknownAnchor));
                };
                if self.stack.len() + anchored.height > MAX_DEPTH {
                    return Err((Some(at), ErrorKind::TooDeep { max: MAX_DEPTH }));
                }
                let (size, height) = (anchored.size, anchored.height);
                let mut node = anchored.node.clone();
                node.at = at;
                self.count(size, at)?;
                self.attach(node, size, height)?;
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
        Ok(())
    }

    fn count(&mut self, nodes: usize, at: Location) -> Result<(), TreeError> {
        self.nodes = self.nodes.saturating_add(nodes);
        if self.nodes > MAX_NODES {
            return Err((Some(at), ErrorKind::TooManyNodes { max: MAX_NODES }));
        }
        Ok(())
    }

    fn open(&mut self, at: Location, open: Open) -> Result<(), TreeError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err((Some(at), ErrorKind::TooDeep { max: MAX_DEPTH }));
        }
        self.count(1, at)?;
        self.stack.push(open);
        self.sizes.push((1, 0));
        Ok(())
    }

    fn close(&mut self) -> Result<(), TreeError> {
        let (Some(open), Some((size, height))) = (self.stack.pop(), self.sizes.pop()) else {
            return Ok(());
        };
        let (node, anchor) = match open {
            Open::Sequence { at, anchor, items } => (
                Node {
                    at,
                    value: Value::Sequence(items),
                },
                anchor,
            ),
            Open::Mapping {
                at,
                anchor,
                entries,
                ..
            } => (
                Node {
                    at,
                    value: Value::Mapping(entries),
                },
                anchor,
            ),
        };
        self.finish(node, anchor, size, height + 1)
    }

    /// A complete node: remember it if anchored, then hang it in its parent.
    fn finish(
        &mut self,
        node: Node,
        anchor: usize,
        size: usize,
        height: usize,
    ) -> Result<(), TreeError> {
        if anchor > 0 {
            self.anchors.insert(
                anchor,
                Anchored {
                    node: node.clone(),
                    size,
                    height,
                },
            );
        }
        if matches!(node.value, Value::Scalar { .. }) {
            self.count(1, node.at)?;
        }
        self.attach(node, size, height)
    }

    fn attach(&mut self, node: Node, size: usize, height: usize) -> Result<(), TreeError> {
        if let Some((parent_size, parent_height)) = self.sizes.last_mut() {
            *parent_size = parent_size.saturating_add(size);
            *parent_height = (*parent_height).max(height);
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Open::Sequence { items, .. }) => items.push(node),
            Some(Open::Mapping { entries, key, .. }) => match key.take() {
                None => *key = Some(node),
                Some(k) => entries.push((k, node)),
            },
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Node {
        parse(text).unwrap().unwrap()
    }

    #[test]
    fn nodes_carry_lines_and_columns() {
        let node = root("a: 1\nb:\n  - x\n  - 'y'\n");
        let Value::Mapping(entries) = &node.value else {
            panic!("{node:?}")
        };
        assert_eq!(entries.len(), 2);
        let (key, value) = &entries[1];
        assert_eq!((key.at.line, key.at.column), (2, 1));
        let Value::Sequence(items) = &value.value else {
            panic!("{value:?}")
        };
        assert_eq!((items[1].at.line, items[1].at.column), (4, 5));
        assert!(matches!(
            &items[1].value,
            Value::Scalar { plain: false, .. }
        ));
    }

    #[test]
    fn aliases_expand_and_duplicates_are_kept() {
        let node = root("a: &x {k: v}\nb: *x\na: 2\n");
        let Value::Mapping(entries) = &node.value else {
            panic!()
        };
        assert_eq!(entries.len(), 3);
        assert!(matches!(entries[1].1.value, Value::Mapping(_)));
        assert_eq!(entries[1].1.at.line, 2);
    }

    #[test]
    fn depth_and_size_are_bounded() {
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        let (_, kind) = parse(&deep).unwrap_err();
        assert_eq!(kind, ErrorKind::TooDeep { max: MAX_DEPTH });
        assert!(parse(&("[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH))).is_ok());

        // Each level doubles the expansion: a "billion laughs" file.
        let mut bomb = String::from("a0: &a0 [x, x]\n");
        for i in 1..30 {
            bomb += &format!("a{i}: &a{i} [*a{p}, *a{p}]\n", p = i - 1);
        }
        let (_, kind) = parse(&bomb).unwrap_err();
        assert_eq!(kind, ErrorKind::TooManyNodes { max: MAX_NODES });
    }

    #[test]
    fn one_document_only_and_syntax_errors_have_places() {
        let (at, kind) = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(kind, ErrorKind::SeveralDocuments);
        assert_eq!(at.map(|l| l.line), Some(2));
        let (at, kind) = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(matches!(kind, ErrorKind::Syntax(_)), "{kind:?}");
        assert!(at.is_some());
        assert!(parse("").unwrap().is_none());
    }
}
