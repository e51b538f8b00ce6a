//! The syntax Kubernetes (and Karpenter's CRD patterns) hold names, label
//! keys and values to: what `kubectl apply` of a Karpenter object would
//! refuse, checked here so a typo never goes live. Each check returns the
//! reason a value is refused, worded for the field it came from.

/// A DNS-1123 subdomain: lowercase letters, digits, `-` and `.`, each
/// dot-separated part starting and ending with a letter or digit, at most
/// 253 characters (label key prefixes, object names).
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 253 {
        return Err(format!("is longer than 253 characters ({})", s.len()));
    }
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    if s.split('.').all(part_ok) {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a DNS subdomain (lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit)"
        ))
    }
}

/// The name part of a qualified name or a label value: letters, digits,
/// `-`, `_` and `.`, starting and ending with a letter or digit.
fn name_chars_ok(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.chars()
        .all(|c| alnum(c) || c == '-' || c == '_' || c == '.')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// A qualified name, as label keys, taint keys and requirement keys are:
/// an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters (letters, digits, `-`, `_`, `.`, starting and ending with a
/// letter or digit).
pub fn qualified_name(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err(format!("{s:?}: the prefix before '/' must not be empty"));
        }
        dns1123_subdomain(p).map_err(|why| format!("{s:?}: prefix {why}"))?;
    }
    if name.is_empty() {
        return Err(format!("{s:?}: the name after '/' must not be empty"));
    }
    if name.len() > 63 {
        return Err(format!(
            "{s:?}: the name part is longer than 63 characters ({})",
            name.len()
        ));
    }
    if !name_chars_ok(name) {
        return Err(format!(
            "{s:?} is not a qualified name ([prefix/]name: letters, digits, '-', '_' and '.', starting and ending with a letter or digit, one '/' at most)"
        ));
    }
    Ok(())
}

/// A label value: empty, or at most 63 characters of letters, digits, `-`,
/// `_` and `.`, starting and ending with a letter or digit.
pub fn label_value(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Ok(());
    }
    if s.len() > 63 {
        return Err(format!("{s:?} is longer than 63 characters ({})", s.len()));
    }
    if !name_chars_ok(s) {
        return Err(format!(
            "{s:?} is not a valid label value (letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"
        ));
    }
    Ok(())
}

/// A Kubernetes quantity as the CRDs' pattern reads it: an optional sign,
/// a decimal number, and a binary (`Ki`…`Ei`) or decimal (`n`…`E`) suffix
/// or an exponent.
pub fn quantity(s: &str) -> Result<(), String> {
    let bad = || format!("{s:?} is not a quantity (like 500m, 2, 1.5, 16Gi or 1e3)");
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(end);
    let number_ok = |n: &str| match n.split_once('.') {
        None => !n.is_empty(),
        Some((i, f)) => {
            let bare_dot = i.is_empty() && f.is_empty();
            !bare_dot && !f.contains('.')
        }
    };
    if !number_ok(number) {
        return Err(bad());
    }
    let suffix_ok = match suffix {
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T"
        | "P" | "E" => true,
        e if e.starts_with(['e', 'E']) => {
            let exp = e[1..].strip_prefix(['+', '-']).unwrap_or(&e[1..]);
            let end = exp
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(exp.len());
            end == exp.len() && number_ok(exp)
        }
        _ => false,
    };
    if suffix_ok { Ok(()) } else { Err(bad()) }
}

/// A Go duration (`300ms`, `1.5h`, `2h45m`, `-1s`) in seconds, as the
/// kubelet parses its duration fields; `None` when it does not read.
pub fn go_duration(s: &str) -> Option<f64> {
    let (sign, body) = match s.strip_prefix('-') {
        Some(b) => (-1.0, b),
        None => (1.0, s.strip_prefix('+').unwrap_or(s)),
    };
    if body == "0" {
        return Some(0.0);
    }
    if body.is_empty() {
        return None;
    }
    let mut total = 0.0;
    let mut rest = body;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let (unit, len) = [
            ("ns", 1e-9),
            ("us", 1e-6),
            ("µs", 1e-6),
            ("ms", 1e-3),
            ("s", 1.0),
            ("m", 60.0),
            ("h", 3600.0),
        ]
        .into_iter()
        .find(|(u, _)| rest.starts_with(u))
        .map(|(u, f)| (f, u.len()))?;
        total += number * unit;
        rest = &rest[len..];
    }
    Some(sign * total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_as_kubernetes_reads_them() {
        for ok in [
            "a",
            "Test",
            "key-only",
            "test.com/Test",
            "test.com.com/test",
            "kubernetes.io",
            "subdomain.k8s.io/test",
            "a_b.c-d",
        ] {
            assert_eq!(qualified_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "test.com.com}",
            "Test.com/test",
            "test/test/test",
            "test/",
            "/test",
            "spaces are not allowed",
            "-a",
            "a-",
        ] {
            assert!(qualified_name(bad).is_err(), "{bad}");
        }
        let long_name = format!("test.com/{}", "a".repeat(64));
        assert!(qualified_name(&long_name).unwrap_err().contains("63"));
        let long_prefix = format!("{}.com/test", "a".repeat(250));
        assert!(qualified_name(&long_prefix).unwrap_err().contains("253"));
    }

    #[test]
    fn label_values() {
        for ok in ["", "a", "test-value", "1.2_3"] {
            assert_eq!(label_value(ok), Ok(()), "{ok}");
        }
        for bad in ["/ is not allowed", "a b", "-a", &"a".repeat(64)] {
            assert!(label_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quantities_follow_the_crd_pattern() {
        for ok in [
            "1", "1000", "0.5", ".5", "5.", "500m", "16Gi", "1e3", "-1", "+2k", "1E-2",
        ] {
            assert_eq!(quantity(ok), Ok(()), "{ok}");
        }
        for bad in ["", "lots", "1GB", "8Gx", "1..2", ".", "1e", "Gi"] {
            assert!(quantity(bad).is_err(), "{bad}");
        }
    }
}
