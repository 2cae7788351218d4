//! [`Dur`]: a duration written with its unit (`250ms`, `1.5s`). It lives in the policy crate,
//! whose configuration types are written in experiment and proxy files too.

pub use tailguard_policy::duration::Dur;
