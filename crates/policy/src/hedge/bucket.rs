//! The token bucket that limits a hedging policy's own extra load (Finagle's `maxExtraLoad`):
//! each request deposits a fraction of a hedge, each hedge takes one, and the bucket holds at most
//! [`BUCKET_CAP`] hedges, so hedges stay below the fraction per request over time while a burst of
//! slow requests can still be hedged.

/// The most tokens the bucket holds, in hedges.
pub const BUCKET_CAP: u64 = 10;

/// Tokens are kept in millionths so deposits like 0.05 add up exactly.
const UNIT: u64 = 1_000_000;

/// Hedges allowed per request on average, starting empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HedgeBucket {
    /// Tokens in millionths.
    tokens: u64,
    deposit: u64,
}

impl HedgeBucket {
    /// A bucket allowing `max_extra` hedges per request, clamped to `[0, BUCKET_CAP]` (NaN counts
    /// as 0: never hedge).
    pub fn new(max_extra: f64) -> Self {
        let extra = if max_extra.is_nan() { 0.0 } else { max_extra.clamp(0.0, BUCKET_CAP as f64) };
        HedgeBucket { tokens: 0, deposit: (extra * UNIT as f64).round() as u64 }
    }

    /// A request starts: it deposits its share.
    pub fn deposit(&mut self) {
        self.tokens = (self.tokens + self.deposit).min(BUCKET_CAP * UNIT);
    }

    /// Takes one hedge's token, if there is one.
    pub fn withdraw(&mut self) -> bool {
        let Some(left) = self.tokens.checked_sub(UNIT) else { return false };
        self.tokens = left;
        true
    }

    /// The tokens in the bucket, in hedges.
    pub fn tokens(&self) -> f64 {
        self.tokens as f64 / UNIT as f64
    }
}
