//! An exact sum of doubles (and integers) with one rounding at the end: a fixed-point
//! accumulator over every finite double's range, so adding and removing terms is exact and the
//! result does not depend on their order.
//!
//! Every finite double is an integer multiple of 2^-1074 (the smallest subnormal) below 2^1024,
//! so it is an integer of at most 2098 bits in those units; [`LIMBS`] 64-bit limbs in two's
//! complement hold that with 64 bits of headroom for the count of terms and the sign. Adding a
//! term touches the two or three limbs it spans and carries; [`ExactSum::to_f64`] rounds to the
//! nearest double, ties to even (an overflow is infinite).

/// Limbs of the accumulator: 2098 bits of range, 64 of headroom, a sign bit.
const LIMBS: usize = 34;
/// The exponent of the accumulator's unit: 2^-1074.
const UNIT_EXP: i32 = -1074;

#[derive(Debug, Clone, PartialEq)]
pub struct ExactSum {
    limbs: Box<[u64; LIMBS]>,
}

impl Default for ExactSum {
    fn default() -> ExactSum {
        ExactSum {
            limbs: Box::new([0; LIMBS]),
        }
    }
}

impl ExactSum {
    /// Adds (or with `negate`, subtracts) a finite double; non-finite values are ignored (JSON
    /// holds none).
    pub fn add_f64(&mut self, f: f64, negate: bool) {
        if !f.is_finite() || f == 0.0 {
            return;
        }
        let bits = f.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as i32;
        let frac = bits & ((1 << 52) - 1);
        // f = m * 2^(e) with m an integer, e >= -1074.
        let (m, e) = if exp == 0 {
            (frac, UNIT_EXP)
        } else {
            (frac | (1 << 52), exp - 1075)
        };
        let neg = (f < 0.0) != negate;
        self.add_mag(u128::from(m), (e - UNIT_EXP) as u32, neg);
    }

    /// Adds (or subtracts) an integer.
    pub fn add_i128(&mut self, i: i128, negate: bool) {
        self.add_mag(i.unsigned_abs(), (-UNIT_EXP) as u32, (i < 0) != negate);
    }

    /// Adds `mag * 2^shift` units, negated when `neg`.
    fn add_mag(&mut self, mag: u128, shift: u32, neg: bool) {
        let (i, off) = ((shift / 64) as usize, shift % 64);
        let shifted = mag << off;
        let words = [
            shifted as u64,
            (shifted >> 64) as u64,
            if off == 0 {
                0
            } else {
                (mag >> (128 - off)) as u64
            },
        ];
        let mut carry = false;
        for k in i..LIMBS {
            let w = words.get(k - i).copied().unwrap_or(0);
            if w == 0 && !carry && k >= i + words.len() {
                break;
            }
            let limb = &mut self.limbs[k];
            if neg {
                let (a, b1) = limb.overflowing_sub(w);
                let (a, b2) = a.overflowing_sub(u64::from(carry));
                *limb = a;
                carry = b1 || b2;
            } else {
                let (a, c1) = limb.overflowing_add(w);
                let (a, c2) = a.overflowing_add(u64::from(carry));
                *limb = a;
                carry = c1 || c2;
            }
        }
    }

    /// The sum rounded to the nearest double (ties to even); infinite past the double range.
    pub fn to_f64(&self) -> f64 {
        let neg = self.limbs[LIMBS - 1] >> 63 == 1;
        let mut mag = *self.limbs;
        if neg {
            // Two's complement negation.
            let mut carry = true;
            for l in mag.iter_mut() {
                let (a, c) = (!*l).overflowing_add(u64::from(carry));
                *l = a;
                carry = c;
            }
        }
        let Some(top) = (0..LIMBS).rev().find(|&k| mag[k] != 0) else {
            return 0.0;
        };
        let p = top as u32 * 64 + (63 - mag[top].leading_zeros());
        let bit = |b: u32| (mag[(b / 64) as usize] >> (b % 64)) & 1;
        let out = if p < 53 {
            // Below 2^53 units the value is a double as it is (subnormal or the lowest binade).
            mag[0] as f64 * f64::from_bits(1)
        } else {
            // The 53 bits from `p` down, then round on the rest.
            let low = p - 52;
            let mut m: u64 = 0;
            for b in (low..=p).rev() {
                m = (m << 1) | bit(b);
            }
            let half = bit(low - 1) == 1;
            let sticky = (0..low - 1).any(|b| bit(b) == 1);
            if half && (sticky || m & 1 == 1) {
                m += 1;
            }
            let mut k = low as i32 + UNIT_EXP;
            if m == 1 << 53 {
                m >>= 1;
                k += 1;
            }
            if k > 971 {
                f64::INFINITY
            } else {
                m as f64 * pow2(k)
            }
        };
        if neg {
            -out
        } else {
            out
        }
    }
}

/// 2^k exactly, for -1074 <= k <= 1023.
fn pow2(k: i32) -> f64 {
    if k >= -1022 {
        f64::from_bits(((k + 1023) as u64) << 52)
    } else {
        f64::from_bits(1u64 << (k + 1074))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    fn sum(terms: &[f64]) -> f64 {
        let mut s = ExactSum::default();
        for &t in terms {
            s.add_f64(t, false);
        }
        s.to_f64()
    }

    #[test]
    fn rounds_once_to_nearest_even() {
        assert_eq!(sum(&[0.1, 0.2, 0.3]), 0.6);
        assert_eq!(sum(&[0.1, 0.2]), 0.1 + 0.2);
        assert_eq!(sum(&[1.0, 1e-16, -1.0]), 1e-16);
        assert_eq!(sum(&[1e308, 1e308, -1e308]), 1e308);
        assert_eq!(sum(&[1e308, 1e308]), f64::INFINITY);
        assert_eq!(sum(&[-1e308, -1e308]), f64::NEG_INFINITY);
        let two53 = 9007199254740992.0;
        assert_eq!(sum(&[two53, 1.0]), two53, "a tie rounds to even");
        assert_eq!(sum(&[two53, 1.0, 1.0]), two53 + 2.0);
        assert_eq!(
            sum(&[two53, 1.0, 1e-300]),
            two53 + 2.0,
            "sticky bits round up"
        );
        assert_eq!(
            sum(&[f64::from_bits(1), f64::from_bits(1)]),
            f64::from_bits(2)
        );
        assert_eq!(
            sum(&[f64::MIN_POSITIVE, -f64::from_bits(1)]),
            f64::MIN_POSITIVE - f64::from_bits(1)
        );
        assert_eq!(sum(&[f64::MAX, -f64::MAX]), 0.0);
        assert_eq!(sum(&[-2.5]), -2.5);
        assert_eq!(sum(&[]), 0.0);
        let mut s = ExactSum::default();
        s.add_i128(i128::from(i64::MAX), false);
        s.add_f64(0.5, false);
        assert_eq!(s.to_f64(), 9.223372036854776e18);
    }

    #[test]
    fn order_does_not_matter_and_removal_is_exact() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let mut terms: Vec<f64> = (0..rng.gen_range(1..20))
                .map(|_| {
                    let m: f64 = rng.gen_range(-1.0..1.0);
                    m * 2f64.powi(rng.gen_range(-60..60))
                })
                .collect();
            let want = sum(&terms);
            terms.shuffle(&mut rng);
            assert_eq!(sum(&terms).to_bits(), want.to_bits());
            let mut s = ExactSum::default();
            for &t in &terms {
                s.add_f64(t, false);
            }
            let before = s.clone();
            let extra = rng.gen_range(-1e300..1e300);
            s.add_f64(extra, false);
            s.add_f64(extra, true);
            assert_eq!(s, before);
            // Integers agree with integer arithmetic.
            let ints: Vec<i64> = (0..5)
                .map(|_| rng.gen_range(-1_000_000..1_000_000))
                .collect();
            let f: Vec<f64> = ints.iter().map(|&i| i as f64).collect();
            assert_eq!(sum(&f), ints.iter().sum::<i64>() as f64);
        }
    }
}
