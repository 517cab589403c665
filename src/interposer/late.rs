//! Late resolution: which allocations a launch's pointer arguments point into, worked out off
//! the program's thread, for the trace of modes that need no answer at the launch (record and
//! cnmem; pool and swap modes resolve at once: they fence and swap what a launch touches).
//!
//! A hook copies the launch's candidate pointer words into its device's batch; one thread of
//! itermem's (`itermem-resolve`) receives the batches in the order the devices hand them over,
//! follows every malloc and free in them with an index of its own ordered by address, fills in
//! each launch's `touched` and hands the batch to the trace writer. An ordered index answers an
//! interior pointer (a view at an offset) without asking the driver, which the hooks' hash map
//! must do, and it costs the program's thread nothing.
//!
//! Within a device the batches keep the events' order, so a launch is resolved against exactly
//! the blocks live at its event. Across devices only the hand-over order is kept: a launch on
//! one device through a pointer into a block that another device allocated in a batch not yet
//! handed over is not resolved (a peer kernel reading memory allocated moments before).

use crate::event::{AllocId, Event, EventKind, Touched};
use crate::trace::TraceWriter;
use crossbeam_channel::{Receiver, Sender};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

/// Events in recording order, with the pointer words of the launches still to resolve.
#[derive(Default)]
pub struct Batch {
    pub events: Vec<Event>,
    /// The words of every launch still to resolve, one after the other.
    words: Vec<u64>,
    /// For each such launch: its position in `events` and its words in `words`.
    launches: Vec<(usize, Range<usize>)>,
}

/// A batch's side vectors, emptied, on their way back to be filled again.
type Spare = (Vec<u64>, Vec<(usize, Range<usize>)>);

impl Batch {
    pub fn with_capacity(events: usize) -> Batch {
        Batch {
            events: Vec::with_capacity(events),
            words: Vec::new(),
            launches: Vec::new(),
        }
    }

    /// A batch from `events` (an empty vector to fill) and a resolver's spare side vectors.
    pub fn reusing(events: Vec<Event>, spare: Option<Spare>) -> Batch {
        let (words, launches) = spare.unwrap_or_default();
        Batch {
            events,
            words,
            launches,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Appends `event`; `words`: the pointer words of a launch whose `touched` is to be filled
    /// in late (empty for any other event).
    pub fn push(&mut self, event: Event, words: &[u64]) {
        if !words.is_empty() {
            let start = self.words.len();
            self.words.extend_from_slice(words);
            self.launches
                .push((self.events.len(), start..self.words.len()));
        }
        self.events.push(event);
    }
}

/// The blocks live at the point of the event stream reached, by start address.
#[derive(Default)]
struct Addresses {
    by_start: BTreeMap<u64, (AllocId, u64)>,
    start_of: FxHashMap<AllocId, u64>,
}

impl Addresses {
    /// Follows `event` (mallocs and frees; everything else leaves the blocks as they are).
    fn follow(&mut self, event: &EventKind) {
        match *event {
            EventKind::Malloc { id, addr, size, .. } => {
                // An id reused (a pinned block's, see `analysis::Numbering`) ends the old block.
                if let Some(old) = self.start_of.insert(id, addr) {
                    self.by_start.remove(&old);
                }
                self.by_start.insert(addr, (id, size));
            }
            EventKind::Free { id, .. } => {
                if let Some(start) = self.start_of.remove(&id) {
                    self.by_start.remove(&start);
                }
            }
            _ => {}
        }
    }

    /// The block containing `addr`, as the hooks' live index answers (a block of size 0 holds
    /// its start).
    fn find(&self, addr: u64) -> Option<AllocId> {
        let (&start, &(id, size)) = self.by_start.range(..=addr).next_back()?;
        (addr - start < size.max(1)).then_some(id)
    }

    /// The allocations `words` point into, each once, in the order first pointed to.
    fn touched(&self, words: &[u64]) -> Touched {
        let mut touched = Touched::new();
        for &word in words {
            if let Some(id) = self.find(word)
                && !touched.contains(&id)
            {
                touched.push(id);
            }
        }
        touched
    }

    /// Fills in the launches of `batch` and follows its allocations, in order.
    fn resolve(&mut self, batch: &mut Batch) {
        let mut launches = batch.launches.iter().peekable();
        for (position, event) in batch.events.iter_mut().enumerate() {
            if let Some((_, words)) = launches.next_if(|(at, _)| *at == position)
                && let EventKind::Launch { touched, .. } = &mut event.kind
            {
                *touched = self.touched(&batch.words[words.clone()]);
            }
            self.follow(&event.kind);
        }
    }
}

enum Msg {
    Batch(Batch),
    /// Answered once every batch sent before it is with the writer.
    Sync(Sender<()>),
}

/// The resolving thread, in front of the trace writer.
pub struct Resolver {
    tx: Sender<Msg>,
    /// Emptied side vectors of resolved batches (the events go back through the writer: see
    /// `TraceWriter::spare_batch`).
    spares: Receiver<Spare>,
}

impl Resolver {
    /// Starts the thread; `in_flight`: batches it holds before a sender waits.
    pub fn start(writer: Arc<TraceWriter>, in_flight: usize) -> std::io::Result<Resolver> {
        let (tx, rx) = crossbeam_channel::bounded(in_flight.max(1));
        let (spare_tx, spares) = crossbeam_channel::bounded(in_flight.max(1));
        std::thread::Builder::new()
            .name("itermem-resolve".into())
            .spawn(move || run(&rx, &writer, &spare_tx))?;
        Ok(Resolver { tx, spares })
    }

    /// The side vectors of a batch resolved before, emptied, if one is waiting.
    pub fn spare(&self) -> Option<Spare> {
        self.spares.try_recv().ok()
    }

    /// Hands `batch` over; waits while the thread holds `in_flight` batches. False if the
    /// thread is gone (its batches are lost).
    pub fn send(&self, batch: Batch) -> bool {
        self.tx.send(Msg::Batch(batch)).is_ok()
    }

    /// Returns once every batch sent before the call is with the writer.
    pub fn sync(&self) {
        let (ack_tx, ack_rx) = crossbeam_channel::bounded(1);
        if self.tx.send(Msg::Sync(ack_tx)).is_ok() {
            let _ = ack_rx.recv();
        }
    }
}

fn run(rx: &Receiver<Msg>, writer: &TraceWriter, spares: &Sender<Spare>) {
    let mut addresses = Addresses::default();
    for msg in rx {
        match msg {
            Msg::Batch(mut batch) => {
                addresses.resolve(&mut batch);
                writer.record_batch(batch.events);
                batch.words.clear();
                batch.launches.clear();
                // Dropped when the senders already have enough spares.
                let _ = spares.try_send((batch.words, batch.launches));
            }
            Msg::Sync(ack) => {
                let _ = ack.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::MemKind;

    fn malloc(id: AllocId, addr: u64, size: u64) -> Event {
        let kind = EventKind::Malloc {
            id,
            addr,
            size,
            kind: MemKind::Device,
            stream: 0,
        };
        Event::new(0, kind)
    }

    fn free(id: AllocId) -> Event {
        Event::new(0, EventKind::Free { id, stream: 0 })
    }

    fn launch() -> Event {
        let kind = EventKind::Launch {
            kernel: 0,
            stream: 0,
            layout_known: true,
            touched: Touched::new(),
        };
        Event::new(0, kind)
    }

    fn touched(event: &Event) -> Vec<AllocId> {
        match &event.kind {
            EventKind::Launch { touched, .. } => touched.to_vec(),
            other => panic!("not a launch: {other:?}"),
        }
    }

    #[test]
    fn a_launch_touches_the_blocks_live_at_its_event_starts_and_interior_pointers_alike() {
        let mut addresses = Addresses::default();
        let mut first = Batch::default();
        first.push(malloc(1, 0x1000, 0x100), &[]);
        first.push(malloc(2, 0x2000, 0), &[]);
        // The start of 1, inside 1 again, the zero-size block 2, just past 1, nowhere.
        first.push(launch(), &[0x1000, 0x10ff, 0x2000, 0x1100, 0x10]);
        first.push(free(1), &[]);
        first.push(launch(), &[0x1000, 0x2000]);
        addresses.resolve(&mut first);
        assert_eq!(touched(&first.events[2]), [1, 2]);
        assert_eq!(touched(&first.events[4]), [2], "1 was freed before");

        // The next batch starts where the last ended: an address reused by a new block.
        let mut second = Batch::default();
        second.push(launch(), &[0x2000]);
        second.push(malloc(3, 0x1000, 0x80), &[]);
        second.push(launch(), &[0x1040, 0x10ff, 0x1000]);
        addresses.resolve(&mut second);
        assert_eq!(touched(&second.events[0]), [2]);
        assert_eq!(
            touched(&second.events[2]),
            [3],
            "0x10ff is past the new block"
        );
    }

    #[test]
    fn a_launch_without_words_to_resolve_keeps_what_it_has() {
        let mut addresses = Addresses::default();
        let mut batch = Batch::default();
        batch.push(malloc(1, 0x1000, 0x100), &[]);
        let mut resolved = launch();
        if let EventKind::Launch { touched, .. } = &mut resolved.kind {
            touched.push(7);
        }
        batch.push(resolved, &[]);
        addresses.resolve(&mut batch);
        assert_eq!(touched(&batch.events[1]), [7]);
    }
}
