//! `fuzz-seeds DIR [target...]`: writes each target's seed corpus to `DIR/<target>/seed-<n>`
//! (all targets without names), for `scripts/fuzz`.

use herald_fuzz_targets::{seeds::seeds, TARGETS};
use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect("usage: fuzz-seeds DIR [target...]"));
    let mut names: Vec<String> = args.collect();
    if names.is_empty() {
        names = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    }
    for name in names {
        let out = dir.join(&name);
        std::fs::create_dir_all(&out).expect("create the corpus directory");
        for (i, seed) in seeds(&name).iter().enumerate() {
            std::fs::write(out.join(format!("seed-{i}")), seed).expect("write a seed");
        }
    }
}
