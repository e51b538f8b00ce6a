//! Resource quantities: parsing Kubernetes quantity strings and the small
//! fixed-shape vector of resources the packer does arithmetic on.
//!
//! The packer compares and adds resource vectors millions of times per solve,
//! so `Resources` keeps the four resources every pod and node has as plain
//! integers and only the rare extended resources (GPUs, Neuron cores, …) in a
//! short sorted list.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Names of the resources with a field of their own in [`Resources`].
pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// A quantity string that is not a valid Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed quantity {input:?}: {reason}")]
pub struct QuantityError {
    pub input: String,
    pub reason: &'static str,
}

/// Parses a Kubernetes quantity (`"1.5"`, `"250m"`, `"4Gi"`, `"1e3"`, `"2k"`)
/// into thousandths of its unit, rounded up as the API server rounds.
pub fn parse_milli(input: &str) -> Result<i64, QuantityError> {
    let err = |reason| QuantityError {
        input: input.to_owned(),
        reason,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(err("no number"));
    }
    // value = digits × 10^exp10 × 2^exp2
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // Most quantities are whole ("500m", "2Gi"): their digits are read in
    // place, not copied.
    let joined;
    let digits = if frac_part.is_empty() {
        int_part
    } else {
        joined = format!("{int_part}{frac_part}");
        joined.as_str()
    };
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(err("too many digits"));
    }
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| err("no number"))?
    };
    let mut exp10: i32 = -(frac_part.len() as i32);
    let mut exp2: u32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other if other.starts_with(['e', 'E']) => {
            let e: i32 = other[1..].parse().map_err(|_| err("bad exponent"))?;
            if !(-30..=30).contains(&e) {
                return Err(err("exponent out of range"));
            }
            exp10 += e;
        }
        _ => return Err(err("unknown suffix")),
    }
    // Work in thousandths: one more factor of 10^3.
    exp10 += 3;
    let scaled = mantissa
        .checked_mul(1i128 << exp2)
        .ok_or_else(|| err("too large"))?;
    let value = if exp10 >= 0 {
        scaled.checked_mul(
            10i128
                .checked_pow(exp10 as u32)
                .ok_or_else(|| err("too large"))?,
        )
    } else {
        let div = 10i128
            .checked_pow((-exp10) as u32)
            .ok_or_else(|| err("too small"))?;
        Some((scaled + div - 1) / div)
    }
    .ok_or_else(|| err("too large"))?;
    let value = i64::try_from(value).map_err(|_| err("too large"))?;
    Ok(if negative { -value } else { value })
}

/// Parses a quantity into whole units, rounded up (`"1500m"` → 2, `"1Ki"` → 1024).
pub fn parse_whole(input: &str) -> Result<i64, QuantityError> {
    let milli = parse_milli(input)?;
    Ok(milli.div_euclid(1000) + i64::from(milli.rem_euclid(1000) != 0))
}

/// A vector of resources: cpu in millicores, memory and storage in bytes,
/// pods and extended resources in whole units. An ephemeral-storage capacity
/// of zero means "not modelled" (it depends on the NodeClass's volumes) and
/// never rejects a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resources {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
    pub pods: i64,
    pub ephemeral_bytes: i64,
    /// Extended resources, sorted by name, no zero entries.
    pub extended: Vec<(String, i64)>,
}

impl Resources {
    pub fn new(cpu_millis: i64, memory_bytes: i64, pods: i64) -> Self {
        Resources {
            cpu_millis,
            memory_bytes,
            pods,
            ..Default::default()
        }
    }

    /// Reads a Kubernetes resource list (`requests`, `capacity`, `limits`).
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Result<Self, QuantityError> {
        let mut r = Resources::default();
        for (name, q) in list {
            r.set(name, &q.0)?;
        }
        Ok(r)
    }

    /// Sets one resource by its Kubernetes name from a quantity string.
    pub fn set(&mut self, name: &str, quantity: &str) -> Result<(), QuantityError> {
        match name {
            CPU => self.cpu_millis = parse_milli(quantity)?,
            MEMORY => self.memory_bytes = parse_whole(quantity)?,
            PODS => self.pods = parse_whole(quantity)?,
            EPHEMERAL_STORAGE => self.ephemeral_bytes = parse_whole(quantity)?,
            other => self.set_extended(other, parse_whole(quantity)?),
        }
        Ok(())
    }

    pub fn set_extended(&mut self, name: &str, value: i64) {
        match self
            .extended
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
        {
            Ok(i) if value == 0 => {
                self.extended.remove(i);
            }
            Ok(i) => self.extended[i].1 = value,
            Err(_) if value == 0 => {}
            Err(i) => self.extended.insert(i, (name.to_owned(), value)),
        }
    }

    pub fn extended(&self, name: &str) -> i64 {
        self.extended
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .map(|i| self.extended[i].1)
            .unwrap_or(0)
    }

    /// The value of a resource by its Kubernetes name, in the units above.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.cpu_millis,
            MEMORY => self.memory_bytes,
            PODS => self.pods,
            EPHEMERAL_STORAGE => self.ephemeral_bytes,
            other => self.extended(other),
        }
    }

    /// True when every resource of `self` is at most the same resource of `capacity`.
    #[inline]
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        self.cpu_millis <= capacity.cpu_millis
            && self.memory_bytes <= capacity.memory_bytes
            && self.pods <= capacity.pods
            && (capacity.ephemeral_bytes == 0 || self.ephemeral_bytes <= capacity.ephemeral_bytes)
            && self
                .extended
                .iter()
                .all(|(n, v)| *v <= capacity.extended(n))
    }

    /// True when `self + extra` fits in `capacity`, without allocating.
    #[inline]
    pub fn fits_with(&self, extra: &Resources, capacity: &Resources) -> bool {
        self.cpu_millis + extra.cpu_millis <= capacity.cpu_millis
            && self.memory_bytes + extra.memory_bytes <= capacity.memory_bytes
            && self.pods + extra.pods <= capacity.pods
            && (capacity.ephemeral_bytes == 0
                || self.ephemeral_bytes + extra.ephemeral_bytes <= capacity.ephemeral_bytes)
            && extra
                .extended
                .iter()
                .all(|(n, v)| self.extended(n) + v <= capacity.extended(n))
    }

    pub fn add(&mut self, other: &Resources) {
        self.cpu_millis += other.cpu_millis;
        self.memory_bytes += other.memory_bytes;
        self.pods += other.pods;
        self.ephemeral_bytes += other.ephemeral_bytes;
        for (n, v) in &other.extended {
            let cur = self.extended(n);
            self.set_extended(n, cur + v);
        }
    }

    /// `self - other`, floored at zero per resource.
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        let mut r = Resources {
            cpu_millis: (self.cpu_millis - other.cpu_millis).max(0),
            memory_bytes: (self.memory_bytes - other.memory_bytes).max(0),
            pods: (self.pods - other.pods).max(0),
            ephemeral_bytes: (self.ephemeral_bytes - other.ephemeral_bytes).max(0),
            extended: Vec::new(),
        };
        for (n, v) in &self.extended {
            r.set_extended(n, (v - other.extended(n)).max(0));
        }
        r
    }

    /// The per-resource maximum of the two.
    pub fn max_each(&mut self, other: &Resources) {
        self.cpu_millis = self.cpu_millis.max(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.max(other.memory_bytes);
        self.pods = self.pods.max(other.pods);
        self.ephemeral_bytes = self.ephemeral_bytes.max(other.ephemeral_bytes);
        for (n, v) in &other.extended {
            if *v > self.extended(n) {
                self.set_extended(n, *v);
            }
        }
    }

    /// The resources of `self` that exceed `capacity`, by Kubernetes name.
    pub fn exceeding(&self, capacity: &Resources) -> Vec<&str> {
        let mut out = Vec::new();
        if self.cpu_millis > capacity.cpu_millis {
            out.push(CPU);
        }
        if self.memory_bytes > capacity.memory_bytes {
            out.push(MEMORY);
        }
        if self.pods > capacity.pods {
            out.push(PODS);
        }
        if capacity.ephemeral_bytes != 0 && self.ephemeral_bytes > capacity.ephemeral_bytes {
            out.push(EPHEMERAL_STORAGE);
        }
        for (n, v) in &self.extended {
            if *v > capacity.extended(n) {
                out.push(n.as_str());
            }
        }
        out
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu={} memory={} pods={}",
            format_cpu(self.cpu_millis),
            format_bytes(self.memory_bytes),
            self.pods
        )?;
        if self.ephemeral_bytes > 0 {
            write!(
                f,
                " ephemeral-storage={}",
                format_bytes(self.ephemeral_bytes)
            )?;
        }
        for (n, v) in &self.extended {
            write!(f, " {n}={v}")?;
        }
        Ok(())
    }
}

/// `1500` → `"1500m"`, `2000` → `"2"`.
pub fn format_cpu(millis: i64) -> String {
    if millis % 1000 == 0 {
        format!("{}", millis / 1000)
    } else {
        format!("{millis}m")
    }
}

/// Bytes in the largest binary unit that divides them exactly.
pub fn format_bytes(bytes: i64) -> String {
    const UNITS: [(&str, i64); 4] = [
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (suffix, size) in UNITS {
        if bytes != 0 && bytes % size == 0 {
            return format!("{}{suffix}", bytes / size);
        }
    }
    format!("{bytes}")
}

pub const MIB: i64 = 1 << 20;
pub const GIB: i64 = 1 << 30;

/// Property-test strategies for `Resources`, shared by the packer's tests.
#[cfg(test)]
pub(crate) mod strategies {
    use super::Resources;
    use proptest::prelude::*;

    /// Requests or room in coarse steps — half CPUs, whole GiB of memory and
    /// of ephemeral storage, pods, sometimes GPUs — each under its bound, so
    /// that fits, ties and exact fills are common.
    pub(crate) fn coarse(
        half_cpus: i64,
        memory_gib: i64,
        pods: i64,
        ephemeral_gib: i64,
        gpus: i64,
    ) -> impl Strategy<Value = Resources> {
        (
            0..half_cpus,
            0..memory_gib,
            0..pods,
            0..ephemeral_gib,
            proptest::option::of(0..gpus),
        )
            .prop_map(|(cpu, memory, pods, ephemeral, gpu)| {
                let mut r = Resources::new(cpu * 500, memory << 30, pods);
                r.ephemeral_bytes = ephemeral << 30;
                if let Some(gpu) = gpu.filter(|&g| g > 0) {
                    r.extended = vec![("nvidia.com/gpu".to_owned(), gpu)];
                }
                r
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, milli: i64) {
        assert_eq!(parse_milli(input), Ok(milli), "{input}");
    }

    #[test]
    fn parses_quantities() {
        check("1", 1000);
        check("250m", 250);
        check("1.5", 1500);
        check("0.1", 100);
        check("1Ki", 1_024_000);
        check("4Gi", 4 * GIB * 1000);
        check("2k", 2_000_000);
        check("1e3", 1_000_000);
        check("1E-3", 1);
        check("100n", 1); // rounded up
        check("-1", -1000);
        check(".5", 500);
        assert_eq!(parse_whole("1500m"), Ok(2));
        assert_eq!(parse_whole("100Mi"), Ok(100 * MIB));
    }

    #[test]
    fn rejects_malformed_quantities() {
        for bad in [
            "",
            "abc",
            "1.2.3",
            "5Xi",
            "1e",
            "Gi",
            "1e400",
            "99999999999999999999999Ei",
            ".",
        ] {
            let e = parse_milli(bad).expect_err(bad);
            assert_eq!(e.input, bad);
        }
    }

    #[test]
    fn fits_and_arithmetic() {
        let mut a = Resources::new(500, GIB, 1);
        a.set_extended("nvidia.com/gpu", 1);
        let cap = Resources::new(1000, 2 * GIB, 10);
        assert!(!a.fits_in(&cap), "gpu missing on capacity");
        let mut cap_gpu = cap.clone();
        cap_gpu.set_extended("nvidia.com/gpu", 1);
        assert!(a.fits_in(&cap_gpu));
        assert!(
            a.fits_with(&Resources::new(500, GIB, 1), &cap_gpu),
            "cpu and memory exactly full"
        );
        assert!(!a.fits_with(&a, &cap_gpu), "a second gpu does not fit");
        assert_eq!(a.exceeding(&cap), vec!["nvidia.com/gpu"]);
        let mut sum = a.clone();
        sum.add(&a);
        assert_eq!(sum.extended("nvidia.com/gpu"), 2);
        assert_eq!(sum.cpu_millis, 1000);
        assert_eq!(
            format!("{}", Resources::new(1500, 4 * GIB, 3)),
            "cpu=1500m memory=4Gi pods=3"
        );
    }
}
