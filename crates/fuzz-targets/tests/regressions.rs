//! Replays every input under `fuzz/regressions/<target>/` (the inputs that once found a bug) and
//! every seed through its target's checks: plain `cargo test` keeps the fuzzers' findings fixed
//! without a fuzzer. A file added there is replayed from then on.

use herald_fuzz_targets::{seeds, target, TARGETS};

#[test]
fn every_regression_input_passes_its_target() {
    let dir = seeds::repo_root().join("fuzz/regressions");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/regressions") {
        let entry = entry.unwrap();
        if !entry.file_type().unwrap().is_dir() {
            continue;
        }
        let name = entry.file_name().into_string().unwrap();
        let check =
            target(&name).unwrap_or_else(|| panic!("fuzz/regressions/{name}: no such target"));
        for input in std::fs::read_dir(entry.path()).unwrap() {
            let path = input.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(outcome.is_ok(), "{} fails again", path.display());
            replayed += 1;
        }
    }
    println!("replayed {replayed} regression inputs");
}

#[test]
fn every_seed_passes_its_target() {
    for (name, check) in TARGETS {
        let seeds = seeds::seeds(name);
        assert!(!seeds.is_empty(), "{name} has seeds");
        for s in seeds {
            check(&s);
        }
    }
}
