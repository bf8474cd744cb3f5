//! `herald-conformance`: `check [DIR]` runs the conformance vectors; `eval` answers JSON-line
//! requests on stdin (one answer line per request) for the differential test in tools/differential.

use std::io::{BufRead, Write};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("eval") => eval_loop(),
        Some("check") => {
            let dir = args
                .get(2)
                .map(Into::into)
                .unwrap_or_else(herald_conformance::default_dir);
            match herald_conformance::check_dir(&dir) {
                Ok(r) => {
                    for f in &r.failures {
                        println!("FAIL {f}");
                    }
                    println!("{} cases, {} failed", r.cases, r.failures.len());
                    std::process::exit(i32::from(!r.failures.is_empty()));
                }
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(2);
                }
            }
        }
        _ => {
            eprintln!("usage: herald-conformance check [DIR] | herald-conformance eval");
            std::process::exit(2);
        }
    }
}

fn eval_loop() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let answer = match serde_json::from_str(&line) {
            Ok(req) => herald_conformance::eval(&req),
            Err(e) => serde_json::json!({"error": "bad_request", "message": e.to_string()}),
        };
        if writeln!(out, "{answer}").and_then(|_| out.flush()).is_err() {
            break;
        }
    }
}
