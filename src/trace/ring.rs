//! A bounded single-producer single-consumer ring of events. The producer
//! (one worker or exchange task) never blocks and never allocates: when the
//! ring is full the event is dropped and counted. Slots are atomics, so no
//! `unsafe` is needed; the producer publishes a slot by advancing `tail`
//! with `Release`, the consumer frees it by advancing `head`.

use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

use super::event::{Event, Kind};

pub(crate) struct Ring {
    /// Four words per slot: start, end, kind | op << 8, id.
    slots: Box<[AtomicU64]>,
    mask: u64,
    /// Next slot to read (consumer).
    head: AtomicU64,
    /// Next slot to write (producer).
    tail: AtomicU64,
    dropped: AtomicU64,
}

impl Ring {
    /// A ring of `capacity` events, rounded up to a power of two.
    pub(crate) fn new(capacity: usize) -> Ring {
        let cap = capacity.max(2).next_power_of_two();
        Ring {
            slots: (0..cap * 4).map(|_| AtomicU64::new(0)).collect(),
            mask: cap as u64 - 1,
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }

    /// Producer side: appends, or drops and counts when full.
    #[inline]
    pub(crate) fn push(&self, e: &Event) {
        let tail = self.tail.load(Relaxed);
        if tail - self.head.load(Acquire) > self.mask {
            self.dropped.fetch_add(1, Relaxed);
            return;
        }
        let i = ((tail & self.mask) * 4) as usize;
        self.slots[i].store(e.start, Relaxed);
        self.slots[i + 1].store(e.end, Relaxed);
        self.slots[i + 2].store(e.kind as u64 | (e.op as u64) << 8, Relaxed);
        self.slots[i + 3].store(e.id, Relaxed);
        self.tail.store(tail + 1, Release);
    }

    /// Consumer side: moves everything published so far into `out`.
    pub(crate) fn drain_into(&self, out: &mut Vec<Event>) {
        let head = self.head.load(Relaxed);
        let tail = self.tail.load(Acquire);
        for n in head..tail {
            let i = ((n & self.mask) * 4) as usize;
            let meta = self.slots[i + 2].load(Relaxed);
            out.push(Event {
                start: self.slots[i].load(Relaxed),
                end: self.slots[i + 1].load(Relaxed),
                kind: Kind::from_u8(meta as u8),
                op: (meta >> 8) as u16,
                id: self.slots[i + 3].load(Relaxed),
            });
        }
        self.head.store(tail, Release);
    }

    /// Events dropped because the ring was full, since it was made.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::event::NO_OP;

    fn ev(n: u64) -> Event {
        Event {
            start: n,
            end: n + 1,
            kind: Kind::Processing,
            op: 3,
            id: n * 7,
        }
    }

    #[test]
    fn full_ring_drops_and_counts_then_recovers() {
        let r = Ring::new(4);
        for n in 0..6 {
            r.push(&ev(n));
        }
        assert_eq!(r.dropped(), 2);
        let mut out = Vec::new();
        r.drain_into(&mut out);
        assert_eq!(out, (0..4).map(ev).collect::<Vec<_>>());
        r.push(&Event {
            kind: Kind::DataSend,
            op: NO_OP,
            ..ev(9)
        });
        out.clear();
        r.drain_into(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].kind, Kind::DataSend);
        assert_eq!(out[0].op, NO_OP);
    }

    #[test]
    fn concurrent_producer_and_consumer_lose_nothing_they_do_not_count() {
        let r = std::sync::Arc::new(Ring::new(64));
        let p = r.clone();
        let producer = std::thread::spawn(move || {
            for n in 0..100_000 {
                p.push(&ev(n));
            }
        });
        let mut got = Vec::new();
        while !producer.is_finished() {
            r.drain_into(&mut got);
        }
        producer.join().expect("producer");
        r.drain_into(&mut got);
        assert_eq!(got.len() as u64 + r.dropped(), 100_000);
        // What arrived is in order and intact.
        assert!(got.windows(2).all(|w| w[0].start < w[1].start));
        assert!(
            got.iter()
                .all(|e| e.end == e.start + 1 && e.id == e.start * 7)
        );
    }
}
