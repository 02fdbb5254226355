//! Event-time timers per key: "look at this key again once the watermark
//! passes this time". Timers may be stale by then (the key's state moved
//! on); whoever handles one checks the key's state, so stale ones are
//! harmless and nothing needs cancelling.

use std::collections::BTreeMap;

/// A key's bin and its canonical encoding.
pub(super) type TimerKey = (u32, Box<[u8]>);

#[derive(Default)]
pub(super) struct KeyTimers {
    due: BTreeMap<i64, Vec<TimerKey>>,
}

impl KeyTimers {
    pub(super) fn schedule(&mut self, at: i64, bin: u32, key: &[u8]) {
        self.due.entry(at).or_default().push((bin, key.into()));
    }

    /// Removes and returns the keys of every timer at or before `until`.
    pub(super) fn pop_until(&mut self, until: i64) -> Vec<TimerKey> {
        let mut keys = Vec::new();
        while let Some(entry) = self.due.first_entry() {
            if *entry.key() > until {
                break;
            }
            keys.extend(entry.remove());
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_only_what_is_due_in_time_order() {
        let mut t = KeyTimers::default();
        t.schedule(30, 1, b"c");
        t.schedule(10, 0, b"a");
        t.schedule(20, 0, b"b");
        t.schedule(10, 2, b"a2");
        let due: Vec<Box<[u8]>> = t.pop_until(20).into_iter().map(|(_, k)| k).collect();
        assert_eq!(
            due,
            vec![
                b"a".as_slice().into(),
                b"a2".as_slice().into(),
                b"b".as_slice().into()
            ]
        );
        assert!(t.pop_until(29).is_empty());
        assert_eq!(t.pop_until(i64::MAX).len(), 1);
    }
}
