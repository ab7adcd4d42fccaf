//! A domain's rules as a lookup tree, and matching one request descriptor
//! to at most one rule, the way envoyproxy/ratelimit's `GetLimit`
//! (`src/config/config_impl.go`) does.
//!
//! Entries are walked one by one from the top level. At each level the
//! entry's key picks the candidates, tried in this order: the descriptor
//! with exactly the entry's value; then the first wildcard descriptor in
//! file order whose `value` (with `*` anywhere, any number of times)
//! matches — found through a [`WildcardIndex`], which tries only the
//! patterns that can match; then the key-only descriptor. There is no backtracking: once a candidate is taken, a
//! later mismatch deeper down means no rule. A rule applies only when the
//! walk ends on the request's last entry at a descriptor that has a
//! `rate_limit`; a matched descriptor without one gives no rule.
//!
//! This module owns the tree and the walk; building it from YAML is
//! `parse`, and `replaces` across descriptors is `resolve`.

use std::sync::Arc;

use crate::resolve::Descriptor;
use crate::route::Route;
use crate::rule::{Rule, ValueMatch};
use crate::wildcard::{WildcardIndex, WildcardPattern};

/// The tree's maps, probed with a request's keys and values on every
/// match: hashed with foldhash, seeded at random per map (see the root
/// Cargo.toml): SipHash took about 160 instructions to find one short key.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Index of a node in a domain's node list.
pub(crate) type NodeId = usize;

/// The descriptors of one level that share a key.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeyBranch {
    exact: HashMap<String, NodeId>,
    /// The wildcard values, in file order.
    wildcards: WildcardIndex,
    any: Option<NodeId>,
}

impl KeyBranch {
    fn find(&self, value: &str) -> Option<NodeId> {
        self.exact
            .get(value)
            .copied()
            .or_else(|| self.wildcards.find(value))
            .or(self.any)
    }

    fn slot(&mut self, value: &ValueMatch) -> Option<NodeId> {
        match value {
            ValueMatch::Exact(v) => self.exact.get(v).copied(),
            ValueMatch::Wildcard(p) => self.wildcards.get(p),
            ValueMatch::Any => self.any,
        }
    }
}

/// One node of the tree: a descriptor of the file.
#[derive(Debug, Clone, Default)]
pub(crate) struct TreeNode {
    /// Index into the domain's rules, when the descriptor has a rate limit.
    rule: Option<usize>,
    /// Its nested descriptors, by key.
    children: HashMap<String, KeyBranch>,
    /// The line of the descriptor, for duplicate errors.
    line: usize,
    /// The file of the descriptor (a merged domain spans several), for
    /// duplicate errors.
    file: Arc<str>,
}

/// One domain: its rules and the tree that finds them.
#[derive(Debug, Clone)]
pub struct Domain {
    name: String,
    file: String,
    line: usize,
    nodes: Vec<TreeNode>,
    rules: Vec<Rule>,
    has_replaces: bool,
    routes: Option<Vec<Route>>,
}

impl PartialEq for Domain {
    /// Domains are equal when they hold equal rules and routes (file and
    /// lines aside).
    fn eq(&self, other: &Domain) -> bool {
        let same_routes = match (&self.routes, &other.routes) {
            (Some(a), Some(b)) => {
                a.len() == b.len()
                    && a.iter().zip(b).all(|(x, y)| {
                        Route {
                            line: 0,
                            ..x.clone()
                        } == Route {
                            line: 0,
                            ..y.clone()
                        }
                    })
            }
            (a, b) => a.is_none() && b.is_none(),
        };
        self.name == other.name && self.rules == other.rules && same_routes
    }
}

impl Domain {
    pub(crate) fn new(name: String, file: String, line: usize) -> Domain {
        Domain {
            name,
            file,
            line,
            nodes: vec![TreeNode::default()],
            rules: Vec::new(),
            has_replaces: false,
            routes: None,
        }
    }

    /// The `routes:` list, in file order; `None` when the file has none
    /// (a gateway then uses [`Route::default_route`] for every request).
    pub fn routes(&self) -> Option<&[Route]> {
        self.routes.as_deref()
    }

    pub(crate) fn set_routes(&mut self, routes: Vec<Route>) {
        self.routes = Some(routes);
    }

    /// The domain's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file that defines it.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The line of its `domain:` field.
    pub fn line(&self) -> usize {
        self.line
    }

    /// Every rule, in file order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rule with this [`id`](Rule::id), if any.
    pub fn rule(&self, id: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.id() == id)
    }

    /// The rule that applies to one request descriptor, without `replaces`
    /// (which needs the request's other descriptors: see
    /// [`RuleSet::resolve`](crate::RuleSet::resolve)). Allocates nothing.
    pub fn find<D: Descriptor + ?Sized>(&self, descriptor: &D) -> Option<&Rule> {
        let last = descriptor.len().checked_sub(1)?;
        let mut node = &self.nodes[0];
        for i in 0..=last {
            let (key, value) = descriptor.entry(i);
            let next = node.children.get(key)?.find(value)?;
            node = &self.nodes[next];
            if i == last {
                return node.rule.map(|r| &self.rules[r]);
            }
        }
        None
    }

    pub(crate) fn has_replaces(&self) -> bool {
        self.has_replaces
    }

    /// The node for `value` under key `key` below `parent`, if the level
    /// already has one (a duplicate), with its file and line.
    pub(crate) fn existing(
        &mut self,
        parent: NodeId,
        key: &str,
        value: &ValueMatch,
    ) -> Option<(Arc<str>, usize)> {
        let id = self.nodes[parent].children.get_mut(key)?.slot(value)?;
        Some((Arc::clone(&self.nodes[id].file), self.nodes[id].line))
    }

    /// Adds a descriptor below `parent`; the caller has checked it is new.
    pub(crate) fn add(
        &mut self,
        parent: NodeId,
        key: &str,
        value: ValueMatch,
        line: usize,
        file: &Arc<str>,
    ) -> NodeId {
        let id = self.nodes.len();
        self.nodes.push(TreeNode {
            rule: None,
            children: HashMap::default(),
            line,
            file: Arc::clone(file),
        });
        let branch = self.nodes[parent]
            .children
            .entry(key.to_string())
            .or_default();
        match value {
            ValueMatch::Exact(v) => {
                branch.exact.insert(v, id);
            }
            ValueMatch::Wildcard(p) => {
                if let Some(pattern) = WildcardPattern::compile(&p) {
                    branch.wildcards.push(pattern, id);
                }
            }
            ValueMatch::Any => branch.any = Some(id),
        }
        id
    }

    /// Gives `node` its rule.
    pub(crate) fn set_rule(&mut self, node: NodeId, rule: Rule) {
        self.has_replaces |= !rule.replaces.is_empty();
        self.nodes[node].rule = Some(self.rules.len());
        self.rules.push(rule);
    }
}
