//! `tollgate simulate`: replay a trace through one limit, deterministically,
//! with no clock but the trace's (SPEC §11).
//!
//! Input: one JSON object per line ([`trace`]). Output: one JSON decision per
//! input request, in order, on stdout ([`replay`]); a summary on stderr
//! ([`summary`]); optionally an SVG picture ([`plot`]).

pub mod plot;
pub mod replay;
pub mod summary;
pub mod trace;

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};

use anyhow::{Context, Result};
use tollgate_core::rate::parse_duration;
use tollgate_core::{AlgorithmName, Limit, Rate};

use crate::args::SimulateArgs;
use plot::Plot;
use replay::Replay;
use summary::Summary;
use trace::TraceReader;

/// Runs `tollgate simulate` with its arguments.
pub fn run(args: &SimulateArgs) -> Result<()> {
    let limit = limit_from(args)?;
    let input: Box<dyn BufRead> = match &args.trace {
        Some(path) => {
            Box::new(BufReader::new(File::open(path).with_context(|| {
                format!("cannot open trace {}", path.display())
            })?))
        }
        None => Box::new(io::stdin().lock()),
    };
    let stdout = io::stdout().lock();
    let capacity = limit.build()?.limit();
    let title = format!(
        "tollgate simulate: {} {}",
        limit.algorithm,
        describe(&limit)
    );
    let mut plot = args.plot.as_ref().map(|_| Plot::new(title, capacity));
    let summary = replay(&limit, input, BufWriter::new(stdout), plot.as_mut())?;
    eprint!("{summary}");
    if let (Some(path), Some(plot)) = (&args.plot, plot) {
        std::fs::write(path, plot.render())
            .with_context(|| format!("cannot write plot {}", path.display()))?;
        eprintln!("plot written to {}", path.display());
    }
    Ok(())
}

/// Replays every line of `input` through `limit`, writing decisions to
/// `output`. Stops at the first bad line with an error naming it.
pub fn replay(
    limit: &Limit,
    input: impl BufRead,
    mut output: impl Write,
    mut plot: Option<&mut Plot>,
) -> Result<Summary> {
    let replay = Replay::new(limit)?;
    let mut reader = TraceReader::default();
    let mut summary = Summary::default();
    for line in input.lines() {
        let line = line.with_context(|| format!("line {}: cannot read", reader.line() + 1))?;
        let Some(request) = reader.parse(&line)? else {
            continue;
        };
        let decision = replay
            .decide(&request)
            .with_context(|| format!("line {}", reader.line()))?;
        serde_json::to_writer(&mut output, &decision)?;
        output.write_all(b"\n")?;
        summary.add(&request.key, decision.allowed);
        if let Some(plot) = plot.as_deref_mut() {
            let used = decision.limit.saturating_sub(decision.remaining);
            plot.add(request.at_ms, &request.key, decision.allowed, used);
        }
    }
    output.flush()?;
    Ok(summary)
}

/// The limit described by the command line.
pub fn limit_from(args: &SimulateArgs) -> Result<Limit> {
    let algorithm: AlgorithmName = args.algorithm.parse()?;
    let rate: Rate = args.rate.parse()?;
    let mut limit = Limit::new(algorithm, rate);
    limit.burst = args.burst;
    limit.step = args.step.as_deref().map(parse_duration).transpose()?;
    limit.lease_ttl = args.lease_ttl.as_deref().map(parse_duration).transpose()?;
    limit.build()?;
    Ok(limit)
}

fn describe(limit: &Limit) -> String {
    let mut text = limit.rate.to_string();
    if let Some(burst) = limit.burst {
        text.push_str(&format!(" burst {burst}"));
    }
    if let Some(step) = limit.step {
        text.push_str(&format!(" step {}ms", step.as_millis()));
    }
    text
}
