//! Numbers compared exactly (R20): integers of any size digit by digit, and against
//! doubles exactly.

use super::*;

/// A number compared exactly (R20).
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub enum Exact {
    /// An integer within `i128`.
    Small(i128),
    /// An integer past `i128`: its sign and decimal digits, no leading zero.
    Big { negative: bool, digits: Box<str> },
    /// A double.
    Double(f64),
}

impl Exact {
    /// The number a value holds, or its literal when one is recorded there.
    pub fn of(n: &Number, lit: Lit<'_>) -> Option<Self> {
        if let Some(Node::Leaf { text, read }) = lit
            && holds(n, *read)
        {
            return Self::literal(text, *read);
        }
        if let Some(i) = n.as_i64() {
            return Some(Exact::Small(i128::from(i)));
        }
        if let Some(u) = n.as_u64() {
            return Some(Exact::Small(i128::from(u)));
        }
        n.as_f64().filter(|f| f.is_finite()).map(Exact::Double)
    }

    /// A literal as written; `read` is the double it parses as.
    fn literal(text: &str, read: f64) -> Option<Self> {
        if text.contains(['.', 'e', 'E']) {
            return read.is_finite().then_some(Exact::Double(read));
        }
        let (negative, digits) = match text.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, text),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Self::integer(negative, digits))
    }

    fn integer(negative: bool, digits: &str) -> Self {
        let digits = digits.trim_start_matches('0');
        if digits.is_empty() {
            return Exact::Small(0);
        }
        // Every i128 has at most 39 digits; parse those, keep the rest as digits.
        if digits.len() <= 38
            && let Ok(v) = digits.parse::<i128>()
        {
            return Exact::Small(if negative { -v } else { v });
        }
        Exact::Big {
            negative,
            digits: digits.into(),
        }
    }

    /// Compares two numbers by exact value; `None` only for a NaN, which JSON cannot hold.
    pub fn compare(&self, other: &Exact) -> Option<Ordering> {
        use Exact::{Big, Double, Small};
        match (self, other) {
            (Small(a), Small(b)) => Some(a.cmp(b)),
            (Double(a), Double(b)) => a.partial_cmp(b),
            (Small(i), Double(f)) => cmp_int_float(*i, *f),
            (Double(f), Small(i)) => cmp_int_float(*i, *f).map(Ordering::reverse),
            (Big { negative, .. }, Small(_)) => Some(sign(*negative)),
            (Small(_), Big { negative, .. }) => Some(sign(*negative).reverse()),
            (
                Big {
                    negative: n1,
                    digits: d1,
                },
                Big {
                    negative: n2,
                    digits: d2,
                },
            ) => Some(cmp_big(*n1, d1, *n2, d2)),
            (Big { negative, digits }, Double(f)) => cmp_big_float(*negative, digits, *f),
            (Double(f), Big { negative, digits }) => {
                cmp_big_float(*negative, digits, *f).map(Ordering::reverse)
            }
        }
    }
}

/// Where an integer past `i128` stands against everything within it.
fn sign(negative: bool) -> Ordering {
    if negative {
        Ordering::Less
    } else {
        Ordering::Greater
    }
}

fn cmp_magnitude(a: &str, b: &str) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn cmp_big(n1: bool, d1: &str, n2: bool, d2: &str) -> Ordering {
    match (n1, n2) {
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
        (false, false) => cmp_magnitude(d1, d2),
        (true, true) => cmp_magnitude(d2, d1),
    }
}

/// An integer past `i128` against a double, exactly: a double that large is an integer,
/// whose exact decimal digits Rust's formatter writes (`{:.0}` is exact, not shortest).
fn cmp_big_float(negative: bool, digits: &str, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f.is_infinite() {
        return Some(if f > 0.0 {
            Ordering::Less
        } else {
            Ordering::Greater
        });
    }
    if f.abs() < TWO_127 {
        return Some(sign(negative));
    }
    let f_digits = format!("{:.0}", f.abs());
    Some(cmp_big(negative, digits, f < 0.0, &f_digits))
}

/// 2^127: doubles at or past it are beyond every `i128`.
const TWO_127: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;

/// Compares an integer with a double exactly.
fn cmp_int_float(i: i128, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f >= TWO_127 {
        return Some(Ordering::Less);
    }
    if f < -TWO_127 {
        return Some(Ordering::Greater);
    }
    let whole = f.trunc();
    // Exact: `whole` is integral and within i128's range.
    #[expect(
        clippy::cast_possible_truncation,
        reason = "integral and in range, checked above"
    )]
    let w = whole as i128;
    match i.cmp(&w) {
        Ordering::Equal => {
            let frac = f - whole;
            Some(if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            })
        }
        other => Some(other),
    }
}
