//! Colors: a qualitative palette for variants (matplotlib's "tab10", whose neighbours differ in
//! hue and lightness) and a sequential one for heatmaps (viridis, readable in grayscale too).

use plotters::style::RGBColor;

const TAB10: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// The color of the `i`-th variant (or replica); repeats after ten.
pub(crate) fn series(i: usize) -> RGBColor {
    TAB10[i % TAB10.len()]
}

/// The color as CSS, for table swatches.
pub(crate) fn css(color: RGBColor) -> String {
    format!("#{:02x}{:02x}{:02x}", color.0, color.1, color.2)
}

/// Viridis at `t` in [0, 1] (clamped), interpolated between nine of its stops.
pub(crate) fn viridis(t: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 9] = [
        (0x44, 0x01, 0x54),
        (0x47, 0x2d, 0x7b),
        (0x3b, 0x52, 0x8b),
        (0x2c, 0x72, 0x8e),
        (0x21, 0x91, 0x8c),
        (0x28, 0xae, 0x80),
        (0x5e, 0xc9, 0x62),
        (0xad, 0xdc, 0x30),
        (0xfd, 0xe7, 0x25),
    ];
    let x = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 } * (STOPS.len() - 1) as f64;
    let i = (x.floor() as usize).min(STOPS.len() - 2);
    let f = x - i as f64;
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viridis_runs_from_purple_to_yellow() {
        assert_eq!(viridis(0.0), RGBColor(0x44, 0x01, 0x54));
        assert_eq!(viridis(1.0), RGBColor(0xfd, 0xe7, 0x25));
        assert_eq!(viridis(f64::NAN), viridis(0.0));
        assert_eq!(css(series(10)), "#1f77b4");
    }
}
