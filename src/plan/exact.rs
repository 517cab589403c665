//! The exact decision procedure for hard small instances: "is there a placement with footprint
//! ≤ C?", answered by a complete search (after MiniMalloc's ideas, Moffitt, ASPLOS'23, on our
//! own data structures), for the instances where the dive of `search.rs` does not meet `LB`.
//!
//! Why a second depth-first search: `search.rs`'s DFS branches over one flat sequence of
//! placements, so when two parts of time become independent (every buffer crossing the
//! instant between them is placed) a dead end in the later part makes it re-enumerate every
//! placement of the earlier one. On MiniMalloc's challenging set that is where the time went
//! (G did not improve in 10 s). This search keeps what that one proves sound and adds:
//!
//! * **Canonical solutions** (as in `search.rs`): every buffer at `min_off`, the top of the
//!   placed buffers it meets (gravity), in increasing `(min_off, rank)` order; the search
//!   branches only on which buffer comes next.
//! * **Dominance** (as in `search.rs`): no candidate at an offset `≥ min_j (min_off(j) + s_j)`
//!   over the unplaced `j` of the subproblem; and, new here, *hatless* candidates: when the
//!   buffer just tried met no unplaced buffer, its key is final, so every later sibling (whose
//!   key is larger) leaves it unplaceable below the cursor: the node fails at once.
//! * **Spatial inference per section**: in each elementary segment `t` the unplaced buffers
//!   resident at `t` pairwise overlap and each goes at or above its floor `max(o, min_off(j))`
//!   (`o` the cursor's offset), so for every threshold `h` the ones whose floor is `≥ h` must
//!   fit in `[h, C)`: sorted by floor, `floor_k + Σ_{l ≤ k} s_l ≤ C`. MiniMalloc's section
//!   inference and unallocated floor are the lowest step of this stair. The whole stair is
//!   checked in the segments of the buffer just placed (there its neighbours' floors all
//!   rose to its top); the lowest step in the segments of the neighbours it raised, and only
//!   where `top + Σ > C` (elsewhere the raised neighbour's own floor, `top`, bounds the
//!   lowest step: measured, the rest of the stair there pruned almost nothing and cost most
//!   of the time); and `o + Σ ≤ C` over the subproblem's span.
//! * **Dynamic temporal decomposition**: after each placement, the unplaced buffers of the
//!   subproblem are swept by lifetime; where no lifetime crosses an instant they split into
//!   parts that meet no common unplaced buffer. Given the placed buffers each part is an
//!   independent problem, fully described by its buffers and their `min_off`s (nothing placed
//!   lies above a buffer's `min_off` among those it meets), so the parts are solved one after
//!   the other and a failing part fails the node without re-enumerating the others. Each part
//!   starts a fresh canonical order: its placements need not follow the cursor (a relaxation,
//!   so nothing is lost).
//! * **Refuted parts are remembered** (beyond MiniMalloc): a part whose search was exhausted
//!   is recorded by its signature (a 128-bit hash of its buffers and `min_off - m`, `m` its
//!   least `min_off`) with the capacity `C - m` it failed at; the same part met again, at any offset, in any later
//!   branch, restart, ranking or smaller capacity, fails at once. Refutations are facts about
//!   the part, independent of the ranking, so they survive restarts.
//!
//! **Restarts.** The instance's own parts of time are searched apart (a part placed at some
//! capacity stays placed at every larger one). Each is searched in rounds of doubling node
//! limits; a round continues the searches of the three static rankings of `search.rs` where
//! they stopped (they are resumable, so no work is repeated, also when the same capacity is
//! asked again) and starts as many fresh searches on seeded perturbations of them: search
//! times are heavy-tailed (on the challenging set one ranking places a part in 0.1 s where
//! another has not in 60 s, and no single ranking suits every part of E).
//!
//! The search is iterative (explicit frames, undo trail), so no depth overflows the stack; a
//! search node costs `O(|part| + degree + changed segments' members)`, which is why
//! `search.rs` uses it only up to [`MAX_BUFFERS`] buffers. It counts one step per node in
//! [`SearchStats::dfs_nodes`] and reads the clock every [`NODES_PER_CHECK`] nodes.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use super::search::{Clock, Dfs, SearchStats, Sections, Stop, Verdict};
use crate::rng::SplitMix64;

/// The exact search runs on instances up to this many buffers; larger ones use `search.rs`'s
/// flat DFS (a node there costs `O(log n)`, here `O(n)`).
pub(crate) const MAX_BUFFERS: usize = 4096;

/// Search nodes between two readings of the clock.
const NODES_PER_CHECK: u64 = 64;

/// Refuted parts remembered at most (16 bytes of key and 8 of capacity each).
const MAX_REFUTED: usize = 1 << 20;

/// The exact search's static data and what it has proved so far.
pub(crate) struct Exact<'d, 'a> {
    dfs: &'d Dfs<'a>,
    sections: &'d Sections,
    /// Every buffer, by the first segment of its lifetime (then index): every subproblem's
    /// buffers are kept in this order, so the sweep that splits them needs no sort.
    by_start: Vec<u32>,
    /// The instance's own parts of time (ranges of `by_start`), most constrained first, each
    /// with the smallest-footprint placement found for it so far (offsets in `by_start`
    /// order): parts are independent, so each is searched (and restarted) on its own, and a
    /// part placed within some capacity is placed within every larger one.
    roots: Vec<(Span, Option<Placed>)>,
    /// Refuted parts: signature → the largest normalised capacity at which it failed.
    refuted: HashMap<u128, u64>,
    /// Source of the perturbed rankings of the restarts.
    rng: SplitMix64,
    /// The searches of the static rankings of the last part and capacity searched, if that
    /// ended out of time: asked again, they go on where they stopped.
    resume: Option<Resumable<'d, 'a>>,
}

/// A placement of a root part: its footprint and offsets (in `by_start` order).
type Placed = (u64, Vec<u64>);

/// Searches to resume (see [`Exact::resume`]).
struct Resumable<'d, 'a> {
    part: Span,
    capacity: u64,
    /// The node limit of the last round.
    limit: u64,
    runs: Vec<Run<'d, 'a>>,
}

impl<'d, 'a> Exact<'d, 'a> {
    /// `None` when the instance is too large for this search or its section lists were not
    /// built (too many members).
    pub(crate) fn new(dfs: &'d Dfs<'a>, seed: u64) -> Option<Exact<'d, 'a>> {
        let prep = dfs.prep;
        if prep.len() > MAX_BUFFERS {
            return None;
        }
        let sections = dfs.sections();
        if sections.members.is_empty() && prep.len() > 0 {
            return None;
        }
        let mut by_start: Vec<u32> = (0..prep.len() as u32).collect();
        by_start.sort_unstable_by_key(|&i| (prep.segs[i as usize].0, i));
        let mut exact = Exact {
            dfs,
            sections,
            by_start,
            roots: Vec::new(),
            refuted: HashMap::new(),
            rng: SplitMix64::new(seed),
            resume: None,
        };
        // The split of a search's first node, on a run that is never searched.
        let n = prep.len();
        let mut run = Run::new(&exact, Vec::new(), 0, (0, n));
        let parts = run.split((0, n));
        let roots: Vec<Span> = run.parts[parts.0..parts.1].iter().map(|p| p.0).collect();
        exact.roots = roots.into_iter().map(|part| (part, None)).collect();
        Some(exact)
    }

    /// A placement with footprint ≤ `capacity`, searching until `deadline` on `clock`: each
    /// part of time on its own, with restarts.
    pub(crate) fn solve(
        &mut self,
        capacity: u64,
        until: (Clock, u64),
        stats: &mut SearchStats,
    ) -> Verdict {
        let prep = self.dfs.prep;
        if capacity < prep.lower_bound {
            return Verdict::Refuted;
        }
        let mut offsets = vec![0; prep.len()];
        for k in 0..self.roots.len() {
            let part = self.roots[k].0;
            let known = match &self.roots[k].1 {
                Some((footprint, placed)) if *footprint <= capacity => Some(placed.clone()),
                _ => None,
            };
            let placed = match known {
                Some(placed) => placed,
                None => match self.solve_part(part, capacity, until, stats) {
                    Verdict::Found(placed) => {
                        let footprint = (part.0..part.1)
                            .map(|r| {
                                let i = self.by_start[r] as usize;
                                placed[r - part.0] + prep.sizes[i]
                            })
                            .max()
                            .unwrap_or(0);
                        self.roots[k].1 = Some((footprint, placed.clone()));
                        placed
                    }
                    other => return other,
                },
            };
            for (r, o) in (part.0..part.1).zip(placed) {
                offsets[self.by_start[r] as usize] = o;
            }
        }
        Verdict::Found(offsets)
    }

    /// The offsets (in `by_start` order) of the root part `part` within `capacity`: rounds
    /// of doubling node limits, each continuing the searches of the static rankings (so no
    /// work is repeated) and starting as many of seeded perturbations of them (restarts: the
    /// search times of such problems are heavy-tailed; what was refuted stays known).
    fn solve_part(
        &mut self,
        part: Span,
        capacity: u64,
        (clock, deadline): (Clock, u64),
        stats: &mut SearchStats,
    ) -> Verdict {
        let dfs = self.dfs;
        let mut state = match self.resume.take() {
            Some(state) if state.part == part && state.capacity == capacity => state,
            _ => {
                stats.dfs_runs += dfs.rankings.len() as u64;
                Resumable {
                    part,
                    capacity,
                    limit: ((part.1 - part.0) as u64).max(64),
                    runs: (dfs.rankings.iter())
                        .map(|rank| Run::new(self, rank.clone(), capacity, part))
                        .collect(),
                }
            }
        };
        let until = (clock, deadline);
        let verdict = 'rounds: loop {
            if clock.now(stats) >= deadline {
                break Verdict::Unknown;
            }
            state.limit = state.limit.saturating_mul(2);
            for k in 0..2 * state.runs.len() {
                let mut fresh;
                let run = match state.runs.get_mut(k) {
                    Some(run) => run,
                    None => {
                        let base = &dfs.rankings[k % dfs.rankings.len()];
                        let rank = self.perturb(base);
                        stats.dfs_runs += 1;
                        fresh = Run::new(self, rank, capacity, part);
                        &mut fresh
                    }
                };
                match run.search(&mut self.refuted, state.limit, until, stats) {
                    Ok(placed) => break 'rounds Verdict::Found(placed),
                    Err(Stop::Exhausted) => {
                        stats.dfs_refuted += 1;
                        break 'rounds Verdict::Refuted;
                    }
                    Err(Stop::Aborted) if clock.now(stats) >= deadline => {
                        break 'rounds Verdict::Unknown;
                    }
                    Err(Stop::Aborted) => {}
                }
            }
        };
        if let Verdict::Unknown = verdict {
            self.resume = Some(state);
        }
        verdict
    }

    /// `rank` with each buffer displaced by a seeded amount up to 2–20 % of `n`.
    fn perturb(&mut self, rank: &[u32]) -> Vec<u32> {
        let spread = [0.02, 0.05, 0.1, 0.2][self.rng.below(4) as usize] * rank.len() as f64;
        let mut keyed: Vec<(f64, usize)> = (0..rank.len())
            .map(|i| (f64::from(rank[i]) + self.rng.unit() * spread, i))
            .collect();
        keyed.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        let mut perturbed = vec![0u32; rank.len()];
        for (r, (_, i)) in keyed.into_iter().enumerate() {
            perturbed[i] = r as u32;
        }
        perturbed
    }
}

/// Records the part `key` as refuted at the normalised `capacity` (while the table has room).
fn remember(memo: &mut HashMap<u128, u64>, key: u128, capacity: u64) {
    if memo.len() < MAX_REFUTED || memo.contains_key(&key) {
        let known = memo.entry(key).or_insert(capacity);
        *known = (*known).max(capacity);
    }
}

/// One change to undo.
enum Undo {
    /// A buffer was placed.
    Place(u32),
    /// `min_off` of a buffer was raised from this value.
    Raise(u32, u64),
}

/// A range of one of the arenas of [`Run`].
type Span = (usize, usize);

/// The arena lengths before a frame pushed its data: restored when it is popped.
#[derive(Clone, Copy)]
struct Arenas {
    buffers: usize,
    candidates: usize,
    parts: usize,
}

enum Frame {
    /// Choosing the next buffer of one subproblem, in canonical order.
    Choose {
        /// The subproblem's unplaced buffers (a range of `Run::buffers`) and segment span.
        part: Span,
        segments: Span,
        /// The candidates (a range of `Run::candidates`) and the next to try.
        candidates: Span,
        next: usize,
        /// The trail's length before the current candidate was placed.
        mark: usize,
        /// Whether a candidate is placed now, and if so whether it met no unplaced buffer.
        current: Option<bool>,
        /// For a part opened by a split: its signature and normalised capacity, recorded as
        /// refuted if the frame fails.
        signature: Option<(u128, u64)>,
        base: Arenas,
    },
    /// Solving independent parts one after the other.
    Split {
        parts: Span,
        next: usize,
        base: Arenas,
    },
}

impl Frame {
    fn base(&self) -> Arenas {
        match self {
            Frame::Choose { base, .. } | Frame::Split { base, .. } => *base,
        }
    }
}

/// What the loop of [`Run::search`] does next.
enum Signal {
    /// The top frame takes its next step.
    Advance,
    /// The top frame is done: whether its subproblem was solved.
    Return(bool),
}

/// The mutable state of one search of one root part at one capacity with one ranking; an
/// aborted search can be resumed where it stopped (see [`Exact::solve_part`]).
struct Run<'d, 'a> {
    dfs: &'d Dfs<'a>,
    sections: &'d Sections,
    rank: Vec<u32>,
    capacity: u64,
    /// The root part searched (a range of `by_start`, the start of `buffers`), and whether
    /// the search has begun.
    root: Span,
    started: bool,
    /// Nodes searched so far.
    nodes: u64,
    min_off: Vec<u64>,
    offsets: Vec<u64>,
    placed: Vec<bool>,
    /// Σ sizes of the unplaced buffers resident in each segment.
    total: Vec<u64>,
    trail: Vec<Undo>,
    frames: Vec<Frame>,
    /// Arenas of the frames: subproblems' buffers (each in `by_start` order), candidates
    /// `(min_off, rank, buffer)`, parts (ranges of `buffers`, with their segment spans).
    buffers: Vec<u32>,
    candidates: Vec<(u64, u32, u32)>,
    parts: Vec<(Span, Span)>,
    /// Segments to re-check after a placement (deduplicated by `affected_mark`).
    affected: Vec<usize>,
    affected_mark: Vec<bool>,
    /// Scratch of the section check: (floor, size) of a segment's unplaced buffers.
    stair: Vec<(u64, u64)>,
}

impl<'d, 'a> Run<'d, 'a> {
    fn new(exact: &Exact<'d, 'a>, rank: Vec<u32>, capacity: u64, root: Span) -> Run<'d, 'a> {
        let dfs = exact.dfs;
        let prep = dfs.prep;
        let n = prep.len();
        Run {
            dfs,
            sections: exact.sections,
            rank,
            capacity,
            root,
            started: false,
            nodes: 0,
            min_off: vec![0; n],
            offsets: vec![0; n],
            placed: vec![false; n],
            total: prep.live_per_segment(),
            trail: Vec::new(),
            frames: Vec::new(),
            buffers: exact.by_start.clone(),
            candidates: Vec::new(),
            parts: Vec::new(),
            affected: Vec::new(),
            affected_mark: vec![false; prep.segments],
            stair: Vec::new(),
        }
    }

    fn arenas(&self) -> Arenas {
        Arenas {
            buffers: self.buffers.len(),
            candidates: self.candidates.len(),
            parts: self.parts.len(),
        }
    }

    /// The offsets (in `by_start` order) of the root part, or why there are none, after at
    /// most `node_limit` more nodes; resumes where an aborted call stopped.
    fn search(
        &mut self,
        memo: &mut HashMap<u128, u64>,
        node_limit: u64,
        (clock, deadline): (Clock, u64),
        stats: &mut SearchStats,
    ) -> Result<Vec<u64>, Stop> {
        let root = self.root;
        if !self.started {
            self.started = true;
            let prep = self.dfs.prep;
            let (mut from, mut to) = (usize::MAX, 0);
            for &i in &self.buffers[root.0..root.1] {
                let (f, t) = prep.segs[i as usize];
                from = from.min(f);
                to = to.max(t);
            }
            if let Signal::Return(_) = self.open(memo, root, (from, to)) {
                return Err(Stop::Exhausted);
            }
        }
        let limit = self.nodes.saturating_add(node_limit);
        let mut signal = Signal::Advance;
        loop {
            signal = match signal {
                Signal::Return(solved) => {
                    let Some(frame) = self.frames.pop() else {
                        return Err(Stop::Exhausted);
                    };
                    let base = frame.base();
                    if let Frame::Choose {
                        signature: Some((key, capacity)),
                        ..
                    } = frame
                        && !solved
                    {
                        remember(memo, key, capacity);
                    }
                    self.buffers.truncate(base.buffers);
                    self.candidates.truncate(base.candidates);
                    self.parts.truncate(base.parts);
                    match self.frames.last() {
                        None if solved => {
                            let buffers = &self.buffers[root.0..root.1];
                            return Ok(buffers.iter().map(|&i| self.offsets[i as usize]).collect());
                        }
                        None => return Err(Stop::Exhausted),
                        // A solved subproblem solves its parent's choice; a failed part fails
                        // its split; otherwise the parent goes on.
                        Some(Frame::Choose { .. }) if solved => Signal::Return(true),
                        Some(Frame::Split { .. }) if !solved => Signal::Return(false),
                        Some(_) => Signal::Advance,
                    }
                }
                Signal::Advance => match self.frames.last_mut() {
                    None => return Err(Stop::Exhausted),
                    Some(Frame::Split { parts, next, .. }) => {
                        if *next == parts.1 {
                            Signal::Return(true)
                        } else {
                            let (part, segments) = self.parts[*next];
                            *next += 1;
                            self.open(memo, part, segments)
                        }
                    }
                    Some(Frame::Choose { .. }) => {
                        // Checked before the node is counted, so that a resumed search counts
                        // it once.
                        if self.nodes >= limit
                            || (self.nodes.is_multiple_of(NODES_PER_CHECK)
                                && clock.now(stats) >= deadline)
                        {
                            return Err(Stop::Aborted);
                        }
                        self.nodes += 1;
                        stats.dfs_nodes += 1;
                        self.step()
                    }
                },
            };
        }
    }

    /// Opens a part of a split: fails at once if it is known refuted or its sections cannot
    /// fit, else pushes its first choice.
    fn open(&mut self, memo: &mut HashMap<u128, u64>, part: Span, segments: Span) -> Signal {
        let members = &self.buffers[part.0..part.1];
        let floor = members
            .iter()
            .map(|&j| self.min_off[j as usize])
            .min()
            .unwrap_or(0);
        let mut h1 = DefaultHasher::new();
        let mut h2 = DefaultHasher::new();
        0x9E37_79B9_7F4A_7C15u64.hash(&mut h2);
        for &j in members {
            let entry = (j, self.min_off[j as usize] - floor);
            entry.hash(&mut h1);
            entry.hash(&mut h2);
        }
        // With buffers on a grid, the same part at an offset off the grid's period is another
        // problem.
        let period = self.dfs.prep.grid_period();
        if period > 1 {
            (floor % period).hash(&mut h1);
            (floor % period).hash(&mut h2);
        }
        let key = (u128::from(h1.finish()) << 64) | u128::from(h2.finish());
        let room = self.capacity - floor;
        if memo.get(&key).is_some_and(|&r| r >= room) {
            return Signal::Return(false);
        }
        if !(segments.0..segments.1).all(|t| self.section_fits(t, 0, true)) {
            remember(memo, key, room);
            return Signal::Return(false);
        }
        let base = self.arenas();
        self.choose(part, segments, None, Some((key, room)), base);
        Signal::Advance
    }

    /// The top frame's next step: undo the current candidate, place the next one, and go
    /// down into what remains of the subproblem.
    fn step(&mut self) -> Signal {
        let Some(Frame::Choose {
            part,
            segments,
            candidates,
            next,
            mark,
            current,
            ..
        }) = self.frames.last_mut()
        else {
            return Signal::Return(false);
        };
        let (part, segments, index, end, previous) = (*part, *segments, *next, candidates.1, *mark);
        if let Some(hatless) = current.take() {
            self.undo(previous);
            if hatless {
                return Signal::Return(false);
            }
        }
        if index == end {
            return Signal::Return(false);
        }
        let (offset, rank, c) = self.candidates[index];
        let trail = self.trail.len();
        let (fits, hatless) = self.place(c as usize, offset, segments);
        if let Some(Frame::Choose {
            next,
            mark,
            current,
            ..
        }) = self.frames.last_mut()
        {
            *next = index + 1;
            *mark = trail;
            *current = Some(hatless);
        }
        if !fits {
            return Signal::Advance;
        }
        // What remains of the subproblem, in the same order.
        let base = self.arenas();
        let start = self.buffers.len();
        for k in part.0..part.1 {
            let j = self.buffers[k];
            if !self.placed[j as usize] {
                self.buffers.push(j);
            }
        }
        let rest = (start, self.buffers.len());
        if rest.0 == rest.1 {
            return Signal::Return(true);
        }
        let parts = self.split(rest);
        if parts.1 - parts.0 == 1 {
            let (part, segments) = self.parts[parts.0];
            self.parts.truncate(parts.0);
            self.choose(part, segments, Some((offset, rank)), None, base);
        } else {
            self.frames.push(Frame::Split {
                parts,
                next: parts.0,
                base,
            });
        }
        Signal::Advance
    }
}

impl Run<'_, '_> {
    /// Splits the buffers `range` of the arena (in `by_start` order) where no lifetime
    /// crosses: pushes the parts, most constrained first (least slack between the capacity
    /// and the fullest segment), and returns their range in `parts`.
    fn split(&mut self, range: Span) -> Span {
        let prep = self.dfs.prep;
        let start = self.parts.len();
        let mut reach = 0usize;
        for k in range.0..range.1 {
            let (from, to) = prep.segs[self.buffers[k] as usize];
            match self.parts.last_mut() {
                Some((part, segments)) if k > range.0 && from < reach => {
                    part.1 = k + 1;
                    segments.1 = segments.1.max(to);
                }
                _ => self.parts.push(((k, k + 1), (from, to))),
            }
            reach = reach.max(to);
        }
        let end = self.parts.len();
        let total = &self.total;
        let min_off = &self.min_off;
        let buffers = &self.buffers;
        let slack = |&(part, segments): &(Span, Span)| {
            let fullest = (segments.0..segments.1)
                .map(|t| total[t])
                .max()
                .unwrap_or(0);
            let floor = buffers[part.0..part.1]
                .iter()
                .map(|&j| min_off[j as usize])
                .min()
                .unwrap_or(0);
            (floor + fullest, part.0)
        };
        self.parts[start..end].sort_by_key(|p| std::cmp::Reverse(slack(p)));
        (start, end)
    }

    /// Opens the frame that chooses the next buffer of `part` among its candidates after
    /// `cursor` (see `candidates_of`); `signature`: as in `Frame::Choose`.
    fn choose(
        &mut self,
        part: Span,
        segments: Span,
        cursor: Option<(u64, u32)>,
        signature: Option<(u128, u64)>,
        base: Arenas,
    ) {
        let candidates = self.candidates_of(part, cursor);
        self.frames.push(Frame::Choose {
            part,
            segments,
            candidates,
            next: candidates.0,
            mark: self.trail.len(),
            current: None,
            signature,
            base,
        });
    }

    /// Pushes the candidates of the subproblem `part` after `cursor`, sorted: the unplaced
    /// buffers whose key `(min_off, rank)` exceeds the cursor and whose `min_off` is below the
    /// dominance bound `min_j (min_off(j) + s_j)`.
    fn candidates_of(&mut self, part: Span, cursor: Option<(u64, u32)>) -> Span {
        let sizes = &self.dfs.prep.sizes;
        let start = self.candidates.len();
        let bound = self.buffers[part.0..part.1]
            .iter()
            .map(|&j| self.min_off[j as usize] + sizes[j as usize])
            .min()
            .unwrap_or(0);
        for k in part.0..part.1 {
            let j = self.buffers[k];
            let key = (self.min_off[j as usize], self.rank[j as usize]);
            if cursor.is_none_or(|c| key > c) && key.0 < bound {
                self.candidates.push((key.0, key.1, j));
            }
        }
        self.candidates[start..].sort_unstable();
        (start, self.candidates.len())
    }

    /// Places `i` at `offset`; returns whether the inference still admits a placement of the
    /// subproblem spanning `segments`, and whether `i` met no unplaced buffer.
    fn place(&mut self, i: usize, offset: u64, segments: Span) -> (bool, bool) {
        let dfs = self.dfs;
        let prep = dfs.prep;
        let size = prep.sizes[i];
        let top = offset + size;
        self.trail.push(Undo::Place(i as u32));
        self.placed[i] = true;
        self.offsets[i] = offset;
        for &(from, to) in prep.resident(i) {
            for t in &mut self.total[from..to] {
                *t -= size;
            }
        }
        let neighbours = &dfs.adj[dfs.adj_start[i]..dfs.adj_start[i + 1]];
        let hatless = neighbours.iter().all(|&j| self.placed[j as usize]);
        // Every unplaced buffer of the subproblem goes at or above `offset`.
        let span = &self.total[segments.0..segments.1];
        if span.iter().any(|&t| offset + t > self.capacity) {
            return (false, hatless);
        }
        for &(from, to) in prep.resident(i) {
            self.mark_affected(from, to);
        }
        let own = self.affected.len();
        let mut fits = true;
        for &j in neighbours {
            let j = j as usize;
            // Gravity stops `j` at `top`, or at the next point of its grid.
            let floor = prep.on_grid_from(j, top);
            if self.placed[j] || self.min_off[j] >= floor {
                continue;
            }
            self.trail.push(Undo::Raise(j as u32, self.min_off[j]));
            self.min_off[j] = floor;
            if floor + prep.sizes[j] > self.capacity {
                fits = false;
                break;
            }
            // `j` now rests at `floor`, so the lowest floor of its segments is at most that:
            // only a segment whose sum does not fit above it can fail its lowest step.
            for &(from, to) in prep.resident(j) {
                for t in from..to {
                    if floor + self.total[t] > self.capacity && !self.affected_mark[t] {
                        self.affected_mark[t] = true;
                        self.affected.push(t);
                    }
                }
            }
        }
        let mut k = 0;
        while k < self.affected.len() {
            let t = self.affected[k];
            self.affected_mark[t] = false;
            fits = fits && self.section_fits(t, offset, k < own);
            k += 1;
        }
        self.affected.clear();
        (fits, hatless)
    }

    fn mark_affected(&mut self, from: usize, to: usize) {
        for t in from..to {
            if !self.affected_mark[t] {
                self.affected_mark[t] = true;
                self.affected.push(t);
            }
        }
    }

    /// The section inference at segment `t` (module doc): sorted by floor `max(offset,
    /// min_off)`, highest first, each floor plus the sizes at or above it fits the capacity.
    fn section_fits(&mut self, t: usize, offset: u64, full: bool) -> bool {
        if self.total[t] == 0 {
            return true;
        }
        let sections = self.sections;
        let members = &sections.members[sections.member_start[t]..sections.member_start[t + 1]];
        let (mut lowest, mut highest) = (u64::MAX, 0);
        for &j in members {
            if !self.placed[j as usize] {
                let floor = self.min_off[j as usize];
                lowest = lowest.min(floor);
                highest = highest.max(floor);
            }
        }
        // Each step of the stair lies between these two: build and sort it only when they
        // disagree.
        let (lowest, highest) = (lowest.max(offset), highest.max(offset));
        if lowest + self.total[t] > self.capacity {
            return false;
        }
        if highest + self.total[t] <= self.capacity || !full {
            return true;
        }
        self.stair.clear();
        for &j in members {
            let j = j as usize;
            if !self.placed[j] {
                self.stair
                    .push((self.min_off[j].max(offset), self.dfs.prep.sizes[j]));
            }
        }
        self.stair
            .sort_unstable_by_key(|&(floor, _)| std::cmp::Reverse(floor));
        let mut above = 0u64;
        for &(floor, size) in &self.stair {
            above += size;
            if floor + above > self.capacity {
                return false;
            }
        }
        true
    }

    /// Undoes the trail down to `mark`.
    fn undo(&mut self, mark: usize) {
        let prep = self.dfs.prep;
        while self.trail.len() > mark {
            match self.trail.pop() {
                Some(Undo::Raise(j, old)) => self.min_off[j as usize] = old,
                Some(Undo::Place(i)) => {
                    let i = i as usize;
                    self.placed[i] = false;
                    for &(from, to) in prep.resident(i) {
                        for t in from..to {
                            self.total[t] += prep.sizes[i];
                        }
                    }
                }
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::greedy::Prepared;
    use crate::plan::{Absence, Alignment, Cutoff, Instance, check};
    use crate::rng::SplitMix64;
    use crate::test_support::buffer as b;

    /// The optimum by brute force: every permutation, each buffer stacked on the placed
    /// buffers it meets. Every placement can be pushed down until each buffer rests on one it
    /// meets or on 0; taken by offset, that is such a stacking, so the least stacking is the
    /// optimum (independent of the search's canonical order, dominance and inference).
    fn brute_force(prep: &Prepared) -> u64 {
        let n = prep.len();
        let meets = |i: usize, j: usize| {
            prep.resident(i)
                .iter()
                .any(|&(a, b)| prep.resident(j).iter().any(|&(c, d)| a < d && c < b))
        };
        let mut order: Vec<usize> = (0..n).collect();
        let mut best = u64::MAX;
        // Heap's algorithm over every permutation of `order`.
        let mut c = vec![0usize; n];
        let mut k = 0;
        loop {
            let mut top = vec![0u64; n];
            let mut footprint = 0;
            for (p, &i) in order.iter().enumerate() {
                let base = order[..p]
                    .iter()
                    .filter(|&&j| meets(i, j))
                    .map(|&j| top[j])
                    .max()
                    .unwrap_or(0);
                top[i] = base + prep.sizes[i];
                footprint = footprint.max(top[i]);
            }
            best = best.min(footprint);
            while k < n && c[k] >= k {
                c[k] = 0;
                k += 1;
            }
            if k >= n {
                break;
            }
            if k % 2 == 0 {
                order.swap(0, k);
            } else {
                order.swap(c[k], k);
            }
            c[k] += 1;
            k = 1;
        }
        best
    }

    #[test]
    fn exact_meets_brute_force_optimum_and_refutes_below() {
        let mut rng = SplitMix64::new(13);
        // Counted in steps: the verdicts cannot depend on the machine's load.
        let until = (Clock::Steps { per_greedy_run: 1 }, u64::MAX);
        for round in 0..500 {
            let n = 1 + rng.below(8) as usize;
            let buffers: Vec<_> = (0..n as u64)
                .map(|id| {
                    let lower = rng.below(8);
                    b(id, lower, lower + 1 + rng.below(5), 1 + rng.below(9))
                })
                .collect();
            // Some rounds swap a long-lived buffer out for a while (a rectangle with a hole).
            let absences = match buffers.iter().find(|x| x.upper - x.lower >= 3) {
                Some(x) if round % 4 == 0 => vec![Absence {
                    id: x.id,
                    from: x.lower + 1,
                    to: x.upper - 1,
                }],
                _ => Vec::new(),
            };
            let instance = Instance::with_absences(buffers, absences).unwrap();
            let prep = Prepared::new(&instance, Alignment::NONE).unwrap();
            let optimum = brute_force(&prep);
            let dfs = Dfs::new(&instance, &prep, Cutoff::NEVER).unwrap();
            let mut exact = Exact::new(&dfs, round).unwrap();
            let mut stats = SearchStats::default();
            let Verdict::Found(offsets) = exact.solve(optimum, until, &mut stats) else {
                panic!("round {round}: no placement within the optimum {optimum}");
            };
            assert_eq!(
                check::validate_parts(&instance, &offsets, optimum, Alignment::NONE),
                Ok(()),
                "round {round}"
            );
            if optimum > prep.lower_bound {
                assert!(
                    matches!(
                        exact.solve(optimum - 1, until, &mut stats),
                        Verdict::Refuted
                    ),
                    "round {round}: below the optimum {optimum} not refuted"
                );
            }
        }
    }
}
