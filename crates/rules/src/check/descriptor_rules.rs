//! [`DescriptorRules`]: the rule of each request descriptor, found as a
//! check goes, for a caller that decides descriptors one by one.

use crate::matcher::Domain;
use crate::overrides::Found;
use crate::resolve::{resolve_rules, Descriptor};
use crate::rule::Rule;

/// The rule of each of a request's descriptors, as [`Plan`](super::Plan)
/// resolves them: a descriptor's runtime override first, then the rules
/// files', `replaces` applied across the request.
///
/// When there is nothing to apply across descriptors (no override found and
/// no rule of the domain `replaces` another), each descriptor's rule is
/// matched when it is asked for, and nothing is allocated; otherwise every
/// rule is resolved up front into a list.
///
/// ```
/// use tollgate_rules::check::DescriptorRules;
/// use tollgate_rules::overrides::Found;
/// use tollgate_rules::RuleSet;
///
/// let rules = RuleSet::from_yaml(
///     "domain: api\n\
///      descriptors:\n\
///      \x20 - key: user\n\
///      \x20   rate_limit: {unit: minute, requests_per_unit: 60}\n",
///     "api.yaml",
/// )
/// .unwrap();
/// let request = [vec![("user", "42")], vec![("path", "/")]];
/// let domain = rules.domain("api").unwrap();
/// let none = Found::EMPTY;
/// let each = DescriptorRules::new(domain, &request, &none);
/// assert_eq!(each.rule(0, &request[0]).map(|r| r.id()), Some("api.user"));
/// assert!(each.rule(1, &request[1]).is_none());
/// ```
#[derive(Debug, Clone)]
pub struct DescriptorRules<'r> {
    domain: &'r Domain,
    /// Every descriptor's rule, when they had to be resolved together.
    listed: Option<Vec<Option<&'r Rule>>>,
}

impl<'r> DescriptorRules<'r> {
    /// The rules of `descriptors` in `domain`, with the runtime overrides
    /// `found` for them (see
    /// [`OverrideTable::find`](crate::overrides::OverrideTable::find)).
    pub fn new<D: Descriptor>(
        domain: &'r Domain,
        descriptors: &[D],
        found: &'r Found,
    ) -> DescriptorRules<'r> {
        let listed = (!found.is_empty() || domain.has_replaces())
            .then(|| resolve_rules(domain, descriptors, found));
        DescriptorRules { domain, listed }
    }

    /// The rule of descriptor `index`, which must be `descriptor`, the one
    /// at that index of the list given to [`new`](DescriptorRules::new);
    /// `None` where no rule applies.
    pub fn rule<D: Descriptor + ?Sized>(&self, index: usize, descriptor: &D) -> Option<&'r Rule> {
        match &self.listed {
            Some(listed) => listed.get(index).copied().flatten(),
            None => self.domain.find(descriptor),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ruleset::RuleSet;

    const REPLACING: &str = "domain: api\n\
        descriptors:\n\
        \x20 - key: user\n\
        \x20   rate_limit: {name: per_user, unit: minute, requests_per_unit: 60}\n\
        \x20 - key: plan\n\
        \x20   rate_limit: {unit: minute, requests_per_unit: 600, replaces: [{name: per_user}]}\n";

    /// Every descriptor's rule as the plan resolves it, and as this does.
    fn both<'r>(
        domain: &'r Domain,
        request: &[Vec<(&str, &str)>],
    ) -> (Vec<Option<&'r str>>, Vec<Option<&'r str>>) {
        let each = DescriptorRules::new(domain, request, &crate::overrides::NO_OVERRIDES);
        let asked = request
            .iter()
            .enumerate()
            .map(|(i, d)| each.rule(i, d).map(Rule::id))
            .collect();
        let planned = super::super::Plan::new(domain, request, false)
            .descriptors()
            .iter()
            .map(|p| p.as_ref().map(|p| p.rule().id()))
            .collect();
        (asked, planned)
    }

    #[test]
    fn replaces_apply_across_the_request() {
        let rules = RuleSet::from_yaml(REPLACING, "api.yaml").unwrap();
        let domain = rules.domain("api").unwrap();
        let request = vec![vec![("user", "42")], vec![("plan", "pro")]];
        let (asked, planned) = both(domain, &request);
        assert_eq!(asked, vec![None, Some("api.plan")]);
        assert_eq!(asked, planned);
        // Without the replacing descriptor, the replaced rule applies.
        let (asked, planned) = both(domain, &request[..1]);
        assert_eq!(asked, vec![Some("api.user")]);
        assert_eq!(asked, planned);
    }

    #[test]
    fn each_descriptor_matches_on_its_own_without_replaces() {
        let rules = RuleSet::from_yaml(
            "domain: api\n\
             descriptors:\n\
             \x20 - key: user\n\
             \x20   rate_limit: {unit: minute, requests_per_unit: 60}\n",
            "api.yaml",
        )
        .unwrap();
        let domain = rules.domain("api").unwrap();
        let request = vec![vec![("path", "/")], vec![("user", "42")]];
        let (asked, planned) = both(domain, &request);
        assert_eq!(asked, vec![None, Some("api.user")]);
        assert_eq!(asked, planned);
    }
}
