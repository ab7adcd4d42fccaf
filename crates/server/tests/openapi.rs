//! `docs/openapi.yaml` against the router: every documented route exists,
//! every route is documented, and every `$ref` in the document resolves.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use saphyr_parser::{Event, Parser};
use tollgate_core::time::{Clock, SystemClock};
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_rules::RuleSet;
use tollgate_server::{router, App, Settings, ROUTES};
use tower::ServiceExt;

/// Just enough of a YAML tree for the document: no anchors, no tags.
#[derive(Debug)]
enum Yaml {
    Scalar(String),
    Sequence(Vec<Yaml>),
    Mapping(Vec<(String, Yaml)>),
}

impl Yaml {
    fn get(&self, key: &str) -> Option<&Yaml> {
        match self {
            Yaml::Mapping(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            Yaml::Sequence(items) => items.get(key.parse::<usize>().ok()?),
            Yaml::Scalar(_) => None,
        }
    }

    /// Every `$ref` value, anywhere below.
    fn refs<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Yaml::Scalar(_) => {}
            Yaml::Sequence(items) => items.iter().for_each(|i| i.refs(out)),
            Yaml::Mapping(entries) => {
                for (k, v) in entries {
                    match v {
                        Yaml::Scalar(target) if k == "$ref" => out.push(target),
                        _ => v.refs(out),
                    }
                }
            }
        }
    }
}

/// Parses one YAML document into a [`Yaml`] tree, panicking on any error.
fn parse(text: &str) -> Yaml {
    enum Open {
        Sequence(Vec<Yaml>),
        Mapping(Vec<(String, Yaml)>, Option<String>),
    }
    fn attach(stack: &mut [Open], node: Yaml) -> Option<Yaml> {
        match stack.last_mut() {
            None => Some(node),
            Some(Open::Sequence(items)) => {
                items.push(node);
                None
            }
            Some(Open::Mapping(entries, key)) => {
                match key.take() {
                    Some(k) => entries.push((k, node)),
                    None => match node {
                        Yaml::Scalar(k) => *key = Some(k),
                        other => panic!("non-scalar mapping key {other:?}"),
                    },
                }
                None
            }
        }
    }
    let mut stack = Vec::new();
    let mut root = None;
    for event in Parser::new_from_str(text) {
        let (event, span) = event.unwrap_or_else(|e| panic!("docs/openapi.yaml: {e}"));
        let done = match event {
            Event::Scalar(text, ..) => Some(Yaml::Scalar(text.into_owned())),
            Event::SequenceStart(..) => {
                stack.push(Open::Sequence(Vec::new()));
                None
            }
            Event::MappingStart(..) => {
                stack.push(Open::Mapping(Vec::new(), None));
                None
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Open::Sequence(items)) => Some(Yaml::Sequence(items)),
                Some(Open::Mapping(entries, _)) => Some(Yaml::Mapping(entries)),
                None => panic!("unbalanced YAML events"),
            },
            Event::Alias(_) => panic!("line {}: aliases are not expected", span.start.line()),
            _ => None,
        };
        if let Some(node) = done {
            if let Some(node) = attach(&mut stack, node) {
                assert!(root.is_none(), "docs/openapi.yaml holds one document");
                root = Some(node);
            }
        }
    }
    root.expect("docs/openapi.yaml is empty")
}

fn document() -> Yaml {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.yaml");
    parse(&std::fs::read_to_string(path).unwrap())
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

#[test]
fn the_document_describes_exactly_the_routes_served() {
    let doc = document();
    assert!(
        matches!(doc.get("openapi"), Some(Yaml::Scalar(v)) if v.starts_with("3.1")),
        "an OpenAPI 3.1 document"
    );
    let Some(Yaml::Mapping(paths)) = doc.get("paths") else {
        panic!("no `paths:` mapping");
    };
    let mut documented = BTreeSet::new();
    for (path, item) in paths {
        let Yaml::Mapping(operations) = item else {
            panic!("{path}: not a mapping");
        };
        for (method, _) in operations {
            if METHODS.contains(&method.as_str()) {
                assert!(
                    documented.insert((method.clone(), path.clone())),
                    "{method} {path} twice"
                );
            }
        }
    }
    let served: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|&(m, p)| (m.to_owned(), p.to_owned()))
        .collect();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "served but not documented: {undocumented:?}; documented but not served: {unserved:?}"
    );
}

#[test]
fn every_reference_in_the_document_resolves() {
    let doc = document();
    let mut refs = Vec::new();
    doc.refs(&mut refs);
    assert!(!refs.is_empty());
    for target in refs {
        let pointer = target
            .strip_prefix("#/")
            .unwrap_or_else(|| panic!("{target}: only local references are expected"));
        let found = pointer
            .split('/')
            .map(|part| part.replace("~1", "/").replace("~0", "~"))
            .try_fold(&doc, |node, part| node.get(&part));
        assert!(found.is_some(), "{target} does not resolve");
    }
}

fn app() -> axum::Router {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
    let store = LocalStore::new(MemoryStore::new(MemoryConfig::default()), clock);
    router(App::new(
        store,
        RuleSet::default(),
        None,
        Settings::default(),
    ))
}

async fn status_of(method: &str, path: &str) -> StatusCode {
    let request = Request::builder()
        .method(Method::from_bytes(method.to_uppercase().as_bytes()).unwrap())
        .uri(path)
        .body(Body::empty())
        .unwrap();
    app().oneshot(request).await.unwrap().status()
}

#[tokio::test]
async fn every_route_in_routes_is_served() {
    for &(method, path) in ROUTES {
        let concrete = path.replace("{key}", "some-key");
        let status = status_of(method, &concrete).await;
        assert!(
            status != StatusCode::NOT_FOUND && status != StatusCode::METHOD_NOT_ALLOWED,
            "{method} {concrete} answered {status}"
        );
    }
    // And the check can tell: an unknown path, a wrong method.
    assert_eq!(status_of("get", "/v1/nothing").await, StatusCode::NOT_FOUND);
    assert_eq!(
        status_of("get", "/v1/check").await,
        StatusCode::METHOD_NOT_ALLOWED
    );
}
