//! Parse throughput of the protocol parsers against `serde_json` on documents of the same size
//! (SPEC F5; issue target: the envelope parser within 2× of serde_json).
//!
//! Run: `cargo bench -p verdict-proto --bench parse`. Besides criterion's per-parser MB/s, the
//! run ends with interleaved ratio measurements (A, B, A, B, …; median of pair ratios), which are
//! what the project quotes: ratios taken in one run are robust to how busy the machine is.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::hint::black_box;
use std::time::Instant;

use std::num::NonZeroU32;

use criterion::{Criterion, Throughput};
use verdict_proto::contracts::reviewer::{self, ReviewerReport};
use verdict_proto::contracts::{Confidence, Text};
use verdict_proto::review::{self, Decision, Finding, Review, Severity};

/// A realistic review with `n` findings: code suggestions, multi-line descriptions.
fn review_with(n: usize) -> Review {
    let findings = (0..n)
        .map(|i| Finding {
            severity: Severity::ALL[i % 4],
            file: (i % 5 != 0).then(|| format!("src/module_{}/file_{}.rs", i % 17, i)),
            start_line: (i % 5 != 0).then_some(10 + i as u32),
            end_line: (i % 5 != 0).then_some(14 + i as u32),
            title: format!("Finding {i}: unchecked index in tokenizer loop"),
            description: format!(
                "`tokens[i + 1]` is read without checking the bound (case {i}).\nA trailing operator makes the parser panic, which takes the request down.\nSee the call in `parse_expr`."
            ),
            suggestion: (i % 3 != 0).then(|| {
                "    let Some(next) = tokens.get(i + 1) else {\n        return Err(ParseError::UnexpectedEnd);\n    };".to_owned()
            }),
        })
        .collect();
    Review {
        version: 1,
        score: 3,
        model_score: 3,
        score_capped: false,
        decision: Decision::RequestChanges,
        decision_reason: "Several panics on malformed input.".into(),
        summary:
            "The change adds an expression parser.\n\n- Good structure.\n- Many unchecked indexes."
                .into(),
        findings,
    }
}

/// The same findings as a reviewer stage's JSON contract (P4) would carry them.
fn reviewer_report(r: &Review) -> ReviewerReport {
    let text = |s: &str| Text::new(s).unwrap();
    ReviewerReport {
        findings: r
            .findings
            .iter()
            .map(|f| reviewer::Finding {
                severity: f.severity,
                file: f.file.as_deref().map(text),
                start_line: f.start_line.and_then(NonZeroU32::new),
                end_line: f.end_line.and_then(NonZeroU32::new),
                quote: f
                    .file
                    .as_ref()
                    .map(|_| text("    let value = tokens[index];")),
                title: text(&f.title),
                description: text(&f.description),
                suggestion: f.suggestion.as_deref().map(text),
                confidence: Confidence::new(0.75).unwrap(),
            })
            .collect(),
        files_reviewed: vec![text("src/module_1/file_1.rs")],
    }
}

struct Docs {
    envelope: String,
    /// The review as JSON: the serde_json reference for the envelope.
    json: String,
    /// A reviewer stage's response (P4), pretty-printed as models write it.
    contract: String,
}

fn docs() -> Docs {
    let r = review_with(4000);
    let envelope = r.to_envelope();
    let json = serde_json::to_string(&r).unwrap();
    let contract = serde_json::to_string_pretty(&reviewer_report(&r)).unwrap();
    assert!(
        envelope.len() >= 1 << 20,
        "envelope: {} bytes",
        envelope.len()
    );
    assert!(
        contract.len() >= 1 << 20,
        "contract: {} bytes",
        contract.len()
    );
    assert!(review::parse(&envelope).is_ok());
    assert!(reviewer::parse(&contract).is_ok());
    Docs {
        envelope,
        json,
        contract,
    }
}

fn bench(c: &mut Criterion, d: &Docs) {
    let mut g = c.benchmark_group("review-envelope-vs-serde_json");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(d.envelope.len() as u64));
    g.bench_function("verdict envelope parser", |b| {
        b.iter(|| review::parse(black_box(&d.envelope)).unwrap())
    });
    g.throughput(Throughput::Bytes(d.json.len() as u64));
    g.bench_function("serde_json to Value", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&d.json)).unwrap())
    });
    g.bench_function("serde_json to typed Review", |b| {
        b.iter(|| serde_json::from_str::<Review>(black_box(&d.json)).unwrap())
    });
    g.finish();

    let mut g = c.benchmark_group("reviewer-contract-vs-serde_json");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(d.contract.len() as u64));
    g.bench_function("verdict reviewer contract parser", |b| {
        b.iter(|| reviewer::parse(black_box(&d.contract)).unwrap())
    });
    g.bench_function("serde_json to Value", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&d.contract)).unwrap())
    });
    g.finish();
}

/// Median over `rounds` of (seconds per byte of `a`) / (seconds per byte of `b`), measured in
/// alternation so both see the same machine state.
fn ratio(
    rounds: usize,
    mut a: impl FnMut() -> usize,
    mut b: impl FnMut() -> usize,
) -> (f64, f64, f64) {
    let mut ratios = Vec::with_capacity(rounds);
    let (mut a_best, mut b_best) = (f64::MAX, f64::MAX);
    for _ in 0..rounds {
        let t = Instant::now();
        let a_bytes = a();
        let a_spb = t.elapsed().as_secs_f64() / a_bytes as f64;
        let t = Instant::now();
        let b_bytes = b();
        let b_spb = t.elapsed().as_secs_f64() / b_bytes as f64;
        a_best = a_best.min(a_spb);
        b_best = b_best.min(b_spb);
        ratios.push(a_spb / b_spb);
    }
    ratios.sort_by(f64::total_cmp);
    let mbps = |spb: f64| 1.0 / spb / 1e6;
    (ratios[rounds / 2], mbps(a_best), mbps(b_best))
}

fn print_ratios(d: &Docs) {
    println!("\nInterleaved ratios (median of 31 pairs; >1 means the first is slower per byte):");
    let (r, a, b) = ratio(
        31,
        || {
            black_box(review::parse(black_box(&d.envelope)).unwrap());
            d.envelope.len()
        },
        || {
            black_box(serde_json::from_str::<serde_json::Value>(black_box(&d.json)).unwrap());
            d.json.len()
        },
    );
    println!(
        "  envelope parser vs serde_json→Value : {r:.2}×  ({a:.0} MB/s vs {b:.0} MB/s; envelope {} bytes, JSON {} bytes)",
        d.envelope.len(),
        d.json.len()
    );
    let (r, a, b) = ratio(
        31,
        || {
            black_box(review::parse(black_box(&d.envelope)).unwrap());
            d.envelope.len()
        },
        || {
            black_box(serde_json::from_str::<Review>(black_box(&d.json)).unwrap());
            d.json.len()
        },
    );
    println!("  envelope parser vs serde_json→Review: {r:.2}×  ({a:.0} MB/s vs {b:.0} MB/s)");
    let (r, a, b) = ratio(
        31,
        || {
            black_box(reviewer::parse(black_box(&d.contract)).unwrap());
            d.contract.len()
        },
        || {
            black_box(serde_json::from_str::<serde_json::Value>(black_box(&d.contract)).unwrap());
            d.contract.len()
        },
    );
    println!(
        "  reviewer contract parser vs serde_json→Value (same {} bytes): {r:.2}×  ({a:.0} MB/s vs {b:.0} MB/s)",
        d.contract.len()
    );
}

fn main() {
    let d = docs();
    // VERDICT_BENCH_RATIOS_ONLY=1 skips criterion's sampling for a quick look while optimising.
    if std::env::var_os("VERDICT_BENCH_RATIOS_ONLY").is_none() {
        let mut c = Criterion::default().configure_from_args();
        bench(&mut c, &d);
        c.final_summary();
    }
    print_ratios(&d);
}
