//! Time series helpers shared by the charts: bucketing, gaps and summaries.

/// One line of a chart: a name, a color kind (CSS `line-{kind}`) and points; `None` values
/// break the line (not measured at that time).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: &'static str,
    pub kind: &'static str,
    pub points: Vec<(i64, Option<f64>)>,
}

impl Series {
    pub fn has_values(&self) -> bool {
        self.points.iter().any(|(_, v)| v.is_some())
    }

    pub fn latest(&self) -> Option<f64> {
        self.points.iter().rev().find_map(|(_, v)| *v)
    }

    /// (average, maximum) of the measured values.
    pub fn avg_max(&self) -> Option<(f64, f64)> {
        let vals: Vec<f64> = self.points.iter().filter_map(|(_, v)| *v).collect();
        if vals.is_empty() {
            return None;
        }
        let max = vals.iter().copied().fold(f64::MIN, f64::max);
        Some((vals.iter().sum::<f64>() / vals.len() as f64, max))
    }
}

/// Averages points into at most `buckets` buckets over `[x0, x1)`; a bucket with no measured
/// value keeps `None`, a bucket with no point at all is left out (a gap).
pub fn bucket(points: &[(i64, Option<f64>)], x0: i64, x1: i64, buckets: usize) -> Vec<(i64, Option<f64>)> {
    if points.len() <= buckets || x1 <= x0 || buckets == 0 {
        return points.to_vec();
    }
    struct Acc {
        b: usize,
        t_sum: i128,
        n: i128,
        v_sum: f64,
        v_n: u32,
    }
    impl Acc {
        fn point(&self) -> (i64, Option<f64>) {
            ((self.t_sum / self.n) as i64, (self.v_n > 0).then(|| self.v_sum / f64::from(self.v_n)))
        }
    }
    let span = (x1 - x0) as f64;
    let last = (buckets - 1) as f64;
    let mut out = Vec::with_capacity(buckets);
    let mut acc: Option<Acc> = None;
    for &(t, v) in points {
        let b = (((t - x0) as f64 / span) * buckets as f64).floor().clamp(0.0, last) as usize;
        match acc.as_mut() {
            Some(a) if a.b == b => {
                a.t_sum += i128::from(t);
                a.n += 1;
                if let Some(v) = v {
                    a.v_sum += v;
                    a.v_n += 1;
                }
            }
            _ => {
                if let Some(a) = acc.take() {
                    out.push(a.point());
                }
                acc = Some(Acc { b, t_sum: i128::from(t), n: 1, v_sum: v.unwrap_or(0.0), v_n: u32::from(v.is_some()) });
            }
        }
    }
    if let Some(a) = acc {
        out.push(a.point());
    }
    out
}

/// The gap beyond which two consecutive points are not joined: 3 × the median spacing.
pub fn max_gap(points: &[(i64, Option<f64>)]) -> i64 {
    let mut d: Vec<i64> = points.windows(2).map(|w| w[1].0 - w[0].0).filter(|d| *d > 0).collect();
    if d.is_empty() {
        return i64::MAX;
    }
    d.sort_unstable();
    d[d.len() / 2].saturating_mul(3).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucketing_keeps_none_and_averages() {
        let pts: Vec<_> = (0..100).map(|i| (i * 10, if i < 50 { Some(i as f64) } else { None })).collect();
        let b = bucket(&pts, 0, 1000, 10);
        assert_eq!(b.len(), 10);
        assert_eq!(b[0].1, Some(4.5));
        assert_eq!(b[9].1, None);
        assert_eq!(max_gap(&pts), 30);
    }
}
