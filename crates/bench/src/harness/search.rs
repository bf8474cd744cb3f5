//! The capacity search shared by `live --search` and `rockbench --search`: the largest value
//! (active queries, writes/s, events/s) whose run still passes, found by doubling then bisecting.

/// A round midpoint of `(lo, hi)`: to two significant digits of their distance.
fn midpoint(lo: u64, hi: u64) -> u64 {
    let d = hi - lo;
    let mut granule = 1u64;
    while granule * 100 <= d {
        granule *= 10;
    }
    let mid = ((lo + hi) as f64 / 2.0 / granule as f64).round() as u64 * granule;
    mid.clamp(lo + 1, hi.saturating_sub(1).max(lo + 1))
}

/// The capacity search as a state machine (`live --search` and `rockbench --search`):
/// ask [`next`](CapacitySearch::next) for the value to try, run it, [`record`] the verdict.
/// Doubles from `start` until a run fails (halves while the start fails, down to start / 64),
/// then bisects `steps` times between the last pass and the first fail; never beyond `bound`.
///
/// [`record`]: CapacitySearch::record
pub struct CapacitySearch {
    bound: u64,
    floor: u64,
    steps_left: u32,
    pass: Option<u64>,
    fail: Option<u64>,
    next: Option<u64>,
}

impl CapacitySearch {
    pub fn new(start: u64, bound: u64, steps: u32) -> CapacitySearch {
        CapacitySearch {
            bound,
            floor: (start / 64).max(1),
            steps_left: steps,
            pass: None,
            fail: None,
            next: Some(start.min(bound).max(1)),
        }
    }

    /// The next value to run, or `None` when the search is over.
    pub fn next(&self) -> Option<u64> {
        self.next
    }

    pub fn record(&mut self, x: u64, passed: bool) {
        if passed {
            self.pass = Some(self.pass.map_or(x, |p| p.max(x)));
        } else {
            self.fail = Some(self.fail.map_or(x, |f| f.min(x)));
        }
        self.next = match (self.pass, self.fail) {
            (Some(lo), Some(hi)) if lo < hi => {
                let mid = midpoint(lo, hi);
                if self.steps_left == 0 || mid <= lo || mid >= hi {
                    None
                } else {
                    self.steps_left -= 1;
                    Some(mid)
                }
            }
            (Some(_), Some(_)) => None,
            (Some(_), None) if x >= self.bound => None,
            (Some(_), None) => Some((x * 2).min(self.bound)),
            (None, _) if x <= self.floor => None,
            (None, _) => Some((x / 2).max(self.floor)),
        };
    }

    /// The largest passing value, or `None` when nothing passed.
    pub fn capacity(&self) -> Option<u64> {
        self.pass
    }
}

#[cfg(test)]
mod capacity_tests {
    use super::CapacitySearch;

    /// Runs a search against a system whose capacity is `cap`; returns (found, values tried).
    fn run(start: u64, bound: u64, steps: u32, cap: u64) -> (Option<u64>, Vec<u64>) {
        let mut s = CapacitySearch::new(start, bound, steps);
        let mut tried = Vec::new();
        while let Some(x) = s.next() {
            tried.push(x);
            s.record(x, x <= cap);
        }
        (s.capacity(), tried)
    }

    #[test]
    fn doubles_then_bisects() {
        let (found, tried) = run(1000, 100_000, 4, 5_500);
        assert_eq!(&tried[..4], &[1000, 2000, 4000, 8000]);
        assert!(
            found.unwrap() <= 5_500 && found.unwrap() >= 5_000,
            "{tried:?}"
        );
    }

    #[test]
    fn stops_at_the_bound_and_halves_from_a_failing_start() {
        assert_eq!(run(1000, 3000, 4, 1_000_000).0, Some(3000));
        let (found, tried) = run(1000, 3000, 0, 300);
        assert_eq!(&tried[..3], &[1000, 500, 250]);
        assert_eq!(found, Some(250));
        assert_eq!(run(64, 1000, 2, 0).0, None);
    }
}

#[cfg(test)]
mod tests {
    use super::midpoint;

    #[test]
    fn midpoints_are_round_and_inside() {
        assert_eq!(midpoint(200_000, 400_000), 300_000);
        assert_eq!(midpoint(2_000, 4_000), 3_000);
        assert_eq!(midpoint(3_000, 4_000), 3_500);
        assert_eq!(midpoint(3_500, 4_000), 3_750);
        assert_eq!(midpoint(1, 2), 2, "no value strictly inside");
        for (lo, hi) in [(1u64, 3u64), (10, 13), (999, 1_001), (25_000, 50_000)] {
            let m = midpoint(lo, hi);
            assert!(lo < m && m < hi, "{lo} < {m} < {hi}");
        }
    }
}
