//! The hand-off of events from the program's threads to itermem's sequencing thread, in modes
//! where nothing the program waits for depends on them (record and cnmem: no plan is served
//! from the detector's answer, no launch is fenced or swapped by what it touches).
//!
//! A hook appends its event to a buffer of its own thread's, under that buffer's lock, which
//! only the sequencing thread ever contends for (about once a millisecond): no lock or cache
//! line is shared between the program's threads per event, only one atomic increment, the
//! event's key in its device's order. Taken under the buffer's lock together with the append,
//! the keys order the events as the calls happened: a call that returned before another
//! started has the smaller key. The sequencing thread (`itermem-sequence`) collects every
//! buffer, puts each device's events in key order and hands them on one by one, a key never
//! before all smaller ones; an event whose predecessor is still in a buffer not yet collected
//! waits for the next round.
//!
//! Memory: a buffer that holds [`BUFFER_LIMIT`] events makes its thread wait for the
//! sequencing thread (not forever: if that thread is gone, events are dropped and counted).

use crate::event::EventKind;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;
use std::cell::OnceCell;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Events a buffer holds before its thread wakes the sequencing thread.
const WAKE_AT: usize = 4096;
/// Events a buffer holds before its thread waits for the sequencing thread.
const BUFFER_LIMIT: usize = 1 << 16;
/// How long the sequencing thread sleeps when nobody wakes it.
const ROUND: Duration = Duration::from_millis(2);

/// One event as a hook saw it, before it has its place in its device's sequence.
pub struct Entry {
    /// Its place in its device's order (see the module doc).
    pub key: u64,
    pub time_ns: u64,
    pub device: u32,
    /// An access event, with an index in its device's sequence; not: a page-locked host
    /// malloc or free, a graph launch's marker (see `analysis::Numbering`).
    pub indexed: bool,
    pub kind: EventKind,
    /// What it changes in the device's live bytes.
    pub live_delta: i64,
    /// Pointer words a launch's arguments were scanned for; `late` are the ones to resolve,
    /// in the buffer's `words`.
    pub words: u64,
    late: Range<usize>,
}

impl Entry {
    pub fn new(device: u32, indexed: bool, kind: EventKind, live_delta: i64, words: u64) -> Entry {
        Entry {
            key: 0,
            time_ns: 0,
            device,
            indexed,
            kind,
            live_delta,
            words,
            late: 0..0,
        }
    }
}

/// One thread's events not yet collected.
#[derive(Default)]
struct Buffer {
    entries: Vec<Entry>,
    words: Vec<u64>,
}

thread_local! {
    /// This thread's buffer, registered with the sequencing thread at its first event.
    static BUFFER: OnceCell<Arc<Mutex<Buffer>>> = const { OnceCell::new() };
}

enum Msg {
    Wake,
    /// Answered once each device's events up to the key given (exclusive) have been handed on.
    Sync(Sender<()>, Vec<u64>),
}

/// The hand-off (one per process: the buffers are thread-locals).
pub struct Staging {
    buffers: Mutex<Vec<Arc<Mutex<Buffer>>>>,
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    /// Cleared if the sequencing thread ends (it does only after an internal error).
    alive: AtomicBool,
    /// Events dropped because the sequencing thread was gone.
    pub dropped: AtomicU64,
}

impl Default for Staging {
    fn default() -> Staging {
        let (tx, rx) = crossbeam_channel::bounded(16);
        Staging {
            buffers: Mutex::new(Vec::new()),
            tx,
            rx,
            alive: AtomicBool::new(true),
            dropped: AtomicU64::new(0),
        }
    }
}

impl Staging {
    /// Appends `entry` (its key taken from `next_key`, its time from `now`) and the launch
    /// words `late` appends to the calling thread's buffer; returns the key.
    #[inline]
    pub fn stage(
        &self,
        next_key: &AtomicU64,
        now: impl FnOnce() -> u64,
        mut entry: Entry,
        late: impl FnOnce(&mut Vec<u64>),
    ) -> u64 {
        let mine = BUFFER.try_with(|buffer| {
            Arc::as_ptr(buffer.get_or_init(|| self.register())) as *const Mutex<Buffer>
        });
        // The thread is exiting (its locals are gone): the event goes to a buffer of its own.
        let orphan;
        let buffer = match mine {
            // SAFETY: the thread's own buffer, held by its thread-local until the thread ends;
            // this function runs on the thread and returns before it ends.
            Ok(buffer) => unsafe { &*buffer },
            Err(_) => {
                orphan = self.register();
                &*orphan
            }
        };
        let mut held = buffer.lock();
        let key = next_key.fetch_add(1, Relaxed);
        entry.key = key;
        entry.time_ns = now();
        let start = held.words.len();
        late(&mut held.words);
        entry.late = start..held.words.len();
        held.entries.push(entry);
        let staged = held.entries.len();
        drop(held);
        if staged == WAKE_AT {
            let _ = self.tx.try_send(Msg::Wake);
        } else if staged >= BUFFER_LIMIT {
            self.wait_for_room(buffer);
        }
        key
    }

    fn register(&self) -> Arc<Mutex<Buffer>> {
        let buffer = Arc::new(Mutex::new(Buffer::default()));
        self.buffers.lock().push(Arc::clone(&buffer));
        buffer
    }

    /// A full buffer: waits until the sequencing thread has collected it, or drops its events
    /// if that thread is gone.
    #[cold]
    fn wait_for_room(&self, buffer: &Mutex<Buffer>) {
        let _ = self.tx.try_send(Msg::Wake);
        while buffer.lock().entries.len() >= BUFFER_LIMIT {
            if !self.alive.load(Relaxed) {
                let mut held = buffer.lock();
                self.dropped.fetch_add(held.entries.len() as u64, Relaxed);
                held.entries.clear();
                held.words.clear();
                return;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Returns once each device's events with keys below `ends` (by ordinal: the keys taken
    /// so far) have been handed on; at once if the sequencing thread is gone, or after
    /// `timeout`.
    pub fn sync(&self, ends: Vec<u64>, timeout: Duration) {
        if !self.alive.load(Relaxed) {
            return;
        }
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        if self
            .tx
            .send_timeout(Msg::Sync(ack_tx, ends), timeout)
            .is_ok()
        {
            let _ = ack_rx.recv_timeout(timeout);
        }
    }

    /// The sequencing thread's loop: hands each device's events to `next` in key order, with
    /// their words to resolve. Returns (and the staging drops what comes later) if `next`
    /// panics.
    pub fn run(&self, mut next: impl FnMut(Entry, &[u64])) {
        let mut order = Order::default();
        loop {
            let (sync, ends) = match self.rx.recv_timeout(ROUND) {
                Ok(Msg::Sync(ack, ends)) => (Some(ack), ends),
                Ok(Msg::Wake) | Err(RecvTimeoutError::Timeout) => (None, Vec::new()),
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let handed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.round(&mut order, &mut next, &ends);
            }));
            if handed.is_err() {
                self.alive.store(false, Relaxed);
                super::report(format_args!(
                    "internal error while recording; the trace and statistics stop here (the \
                     program is unaffected)"
                ));
                return;
            }
            if let Some(ack) = sync {
                let _ = ack.send(());
            }
        }
    }

    /// Collects every buffer and hands on what is in order, until each device's keys below
    /// `ends` are handed on (a key taken and not yet appended is waited for, briefly).
    fn round(&self, order: &mut Order, next: &mut impl FnMut(Entry, &[u64]), ends: &[u64]) {
        for attempt in 0.. {
            self.collect(order);
            order.hand_on(next, false);
            if order.reached(ends) {
                return;
            }
            if attempt == 100 {
                // A key that never came (its thread stopped inside a hook): hand on the rest.
                order.hand_on(next, true);
                return;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Moves every buffer's events into `order`; forgets buffers of threads that have ended.
    fn collect(&self, order: &mut Order) {
        let mut buffers = self.buffers.lock();
        buffers.retain(|buffer| {
            // The buffer's lock is held only to swap its vectors with empty ones: its thread
            // waits no longer than that.
            let mut taken = std::mem::take(&mut order.spare);
            std::mem::swap(&mut *buffer.lock(), &mut taken);
            order.take(&mut taken);
            order.spare = taken;
            // Only the registry holds it: its thread has ended, and it is empty now.
            Arc::strong_count(buffer) > 1
        });
    }
}

/// The sequencing thread's events not yet handed on, by device.
#[derive(Default)]
struct Order {
    /// Collected events not yet handed on (kept across rounds when a key is missing), and
    /// their words.
    waiting: Vec<Entry>,
    words: Vec<u64>,
    /// The next key of each device.
    next_key: Vec<u64>,
    /// An empty vector kept for the next round's events that wait.
    kept: Vec<Entry>,
    /// Empty vectors to swap with a thread's buffer (they keep their capacity).
    spare: Buffer,
}

impl Order {
    fn take(&mut self, buffer: &mut Buffer) {
        let offset = self.words.len();
        self.words.append(&mut buffer.words);
        self.waiting
            .extend(buffer.entries.drain(..).map(|mut entry| {
                entry.late = entry.late.start + offset..entry.late.end + offset;
                entry
            }));
    }

    /// Hands on, per device, every event whose key follows the last one handed on; with
    /// `skip_gaps`, every event waiting, in key order, as if the missing keys had been skipped.
    fn hand_on(&mut self, next: &mut impl FnMut(Entry, &[u64]), skip_gaps: bool) {
        self.waiting
            .sort_unstable_by_key(|entry| (entry.device, entry.key));
        let mut kept = std::mem::take(&mut self.kept);
        for entry in self.waiting.drain(..) {
            let device = entry.device as usize;
            if self.next_key.len() <= device {
                self.next_key.resize(device + 1, 0);
            }
            // (A smaller key came after its gap was skipped: handed on as soon as seen.)
            if skip_gaps || entry.key <= self.next_key[device] {
                self.next_key[device] = self.next_key[device].max(entry.key + 1);
                let late = entry.late.clone();
                next(entry, &self.words[late]);
            } else {
                kept.push(entry);
            }
        }
        self.kept = std::mem::replace(&mut self.waiting, kept);
        self.compact_words();
    }

    /// Whether each device's keys below `ends` (by ordinal) have been handed on.
    fn reached(&self, ends: &[u64]) -> bool {
        ends.iter()
            .enumerate()
            .all(|(device, &end)| end == 0 || self.next_key.get(device).is_some_and(|&k| k >= end))
    }

    /// Keeps only the words of events still waiting.
    fn compact_words(&mut self) {
        if self.waiting.is_empty() {
            self.words.clear();
            return;
        }
        let mut words = Vec::new();
        for entry in &mut self.waiting {
            let start = words.len();
            words.extend_from_slice(&self.words[entry.late.clone()]);
            entry.late = start..words.len();
        }
        self.words = words;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(device: u32, id: u64) -> Entry {
        Entry::new(device, true, EventKind::Free { id, stream: 0 }, 0, 0)
    }

    fn id(entry: &Entry) -> u64 {
        match entry.kind {
            EventKind::Free { id, .. } => id,
            _ => unreachable!(),
        }
    }

    #[test]
    fn events_of_many_threads_are_handed_on_once_each_in_key_order_per_device() {
        let staging = Staging::default();
        let keys = [AtomicU64::new(0), AtomicU64::new(0)];
        std::thread::scope(|scope| {
            for thread in 0..4u64 {
                let (staging, keys) = (&staging, &keys);
                scope.spawn(move || {
                    for n in 0..1000 {
                        let device = (n % 2) as u32;
                        let late = [thread, n];
                        let entry = free(device, thread * 1000 + n);
                        staging.stage(
                            &keys[device as usize],
                            || n,
                            entry,
                            |words| words.extend_from_slice(&late),
                        );
                    }
                });
            }
        });
        let mut order = Order::default();
        let mut handed: Vec<(u32, u64, u64, Vec<u64>)> = Vec::new();
        let ends: Vec<u64> = keys.iter().map(|k| k.load(Relaxed)).collect();
        staging.round(
            &mut order,
            &mut |entry, late| handed.push((entry.device, entry.key, id(&entry), late.to_vec())),
            &ends,
        );
        assert_eq!(handed.len(), 4000);
        for device in 0..2 {
            let keys: Vec<u64> = handed
                .iter()
                .filter(|h| h.0 == device)
                .map(|h| h.1)
                .collect();
            assert_eq!(keys, (0..2000).collect::<Vec<_>>(), "device {device}");
        }
        // Each event kept its own words.
        for (_, _, id, late) in &handed {
            assert_eq!(late, &[id / 1000, id % 1000]);
        }
        // The threads have ended: their buffers are forgotten at a collection once their
        // thread-locals are destroyed (a scoped thread is joined before that, so wait for it).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            staging.collect(&mut order);
            if staging.buffers.lock().is_empty() || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(staging.buffers.lock().is_empty());
    }

    #[test]
    fn an_event_waits_for_the_keys_before_it() {
        let mut order = Order::default();
        let mut buffer = Buffer::default();
        for key in [0, 1, 3] {
            let mut entry = free(0, key);
            entry.key = key;
            buffer.entries.push(entry);
        }
        order.take(&mut buffer);
        let mut handed = Vec::new();
        order.hand_on(&mut |entry, _| handed.push(entry.key), false);
        assert_eq!(handed, [0, 1]);
        let mut late = free(0, 2);
        late.key = 2;
        buffer.entries.push(late);
        order.take(&mut buffer);
        order.hand_on(&mut |entry, _| handed.push(entry.key), false);
        assert_eq!(handed, [0, 1, 2, 3]);
        assert!(order.reached(&[4]));
        assert!(!order.reached(&[5]));
    }

    #[test]
    fn a_key_that_never_comes_is_skipped_when_everything_is_asked_for() {
        let staging = Staging::default();
        let key = AtomicU64::new(1); // key 0 was taken and never staged
        staging.stage(&key, || 0, free(0, 9), |_| {});
        let mut order = Order::default();
        let mut handed = Vec::new();
        staging.round(&mut order, &mut |entry, _| handed.push(entry.key), &[2]);
        assert_eq!(handed, [1]);
    }
}
