//! `tollgate check-rules PATH`: loads rules files exactly as the server
//! would and reports the first error as file:line:reason.

use anyhow::Result;
use tollgate_rules::{LoadOptions, RuleSet};

use crate::args::CheckRulesArgs;

/// Validates `args.path`; prints a one-line summary on success.
pub fn run(args: &CheckRulesArgs) -> Result<()> {
    let options = LoadOptions {
        merge_domains: args.merge_domains,
    };
    let rules = RuleSet::load_with(&args.path, options)?;
    let domains: Vec<&str> = rules.domains().map(|d| d.name()).collect();
    println!(
        "{}: ok ({} domain{}: {})",
        args.path.display(),
        domains.len(),
        if domains.len() == 1 { "" } else { "s" },
        domains.join(", ")
    );
    Ok(())
}
