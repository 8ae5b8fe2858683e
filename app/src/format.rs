//! Number formatting shared by the components (and identical on server and
//! client, so hydration finds the text it expects).

/// `12.5` → `12.5`, `12.0` → `12`, `9.375` → `9.38`.
pub fn num(x: f64) -> String {
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// A percentage for a bar's width, clamped to 0–100.
pub fn width(percent: f64) -> String {
    format!("width: {}%", num(percent.clamp(0.0, 100.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_trailing_zeros() {
        assert_eq!(num(12.5), "12.5");
        assert_eq!(num(12.0), "12");
        assert_eq!(num(9.375), "9.38");
        assert_eq!(num(0.0), "0");
        assert_eq!(width(180.0), "width: 100%");
    }
}
