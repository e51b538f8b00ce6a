//! `SharedList`: a read-mostly list that pods of one workload share.
//!
//! A listing gives a workload's pods one after another, each with the same
//! affinity. `PodReader` converts that affinity once and hands every such
//! pod the same list: a clone is a reference count, not a copy of its
//! terms, selectors and strings, and two pods holding the same list compare
//! equal without looking at the terms (`BatchPods` groups thousands of
//! pods by such comparisons).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// A list read as a slice; cloned by sharing. An empty list holds no
/// allocation. Equality, hashing and `Debug` are the slice's.
pub struct SharedList<T>(Option<Arc<Vec<T>>>);

impl<T> SharedList<T> {
    /// The list, to change: copied first if another holder shares it.
    pub fn to_mut(&mut self) -> &mut Vec<T>
    where
        T: Clone,
    {
        Arc::make_mut(self.0.get_or_insert_with(Default::default))
    }

    /// The same list, not only an equal one.
    pub fn shares_with(&self, other: &SharedList<T>) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }
}

impl<T> Clone for SharedList<T> {
    fn clone(&self) -> Self {
        SharedList(self.0.clone())
    }
}

impl<T> Default for SharedList<T> {
    fn default() -> Self {
        SharedList(None)
    }
}

impl<T> Deref for SharedList<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl<T> From<Vec<T>> for SharedList<T> {
    fn from(v: Vec<T>) -> Self {
        SharedList((!v.is_empty()).then(|| Arc::new(v)))
    }
}

impl<T> FromIterator<T> for SharedList<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        iter.into_iter().collect::<Vec<T>>().into()
    }
}

impl<'a, T> IntoIterator for &'a SharedList<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: PartialEq> PartialEq for SharedList<T> {
    fn eq(&self, other: &Self) -> bool {
        self.shares_with(other) || **self == **other
    }
}

impl<T: Eq> Eq for SharedList<T> {}

impl<T: Hash> Hash for SharedList<T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl<T: fmt::Debug> fmt::Debug for SharedList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_and_a_change_copies_only_the_changed_holder() {
        let a: SharedList<String> = vec!["x".to_owned(), "y".to_owned()].into();
        let mut b = a.clone();
        assert!(a.shares_with(&b));
        assert_eq!(a, b);
        b.to_mut().push("z".to_owned());
        assert!(!a.shares_with(&b));
        assert_eq!(&*a, ["x", "y"]);
        assert_eq!(&*b, ["x", "y", "z"]);
        assert_ne!(a, b);
    }

    #[test]
    fn equal_lists_apart_are_equal_and_hash_alike() {
        use std::collections::hash_map::DefaultHasher;
        let a: SharedList<u32> = vec![1, 2].into();
        let b: SharedList<u32> = [1, 2].into_iter().collect();
        assert!(!a.shares_with(&b));
        assert_eq!(a, b);
        let hash = |l: &SharedList<u32>| {
            let mut h = DefaultHasher::new();
            l.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&a), hash(&b));
        // As the slice (and so as the `Vec` it replaced) hashes.
        let mut h = DefaultHasher::new();
        vec![1u32, 2].hash(&mut h);
        assert_eq!(hash(&a), h.finish());
        assert_eq!(format!("{a:?}"), "[1, 2]");
    }

    #[test]
    fn empty_lists_hold_nothing_and_equal_each_other() {
        let a: SharedList<u32> = Vec::new().into();
        assert!(a.0.is_none());
        assert_eq!(a, SharedList::default());
        assert!(a.is_empty());
        let mut b = a.clone();
        b.to_mut().push(3);
        assert_eq!(&*b, [3]);
        assert!(a.is_empty());
    }
}
