//! The tally of a rank's memory during a run, in words (what [`crate::RunReport`]'s peaks
//! report): kept by the executor and the moves it calls.

/// Words of tensor data held: `peak` counts blocks, the new block of a redistribution and a
/// group's intermediates (the plan's memory model); `peak_buffers` adds the message buffers.
#[derive(Default)]
pub(crate) struct Mem {
    cur: u64,
    peak: u64,
    peak_buffers: u64,
}

impl Mem {
    /// The peak of blocks and intermediates, in words.
    pub(crate) fn peak(&self) -> u64 {
        self.peak
    }
    /// The peak with message buffers counted too, in words.
    pub(crate) fn peak_buffers(&self) -> u64 {
        self.peak_buffers
    }
    /// A block of `w` words is now held.
    pub(crate) fn add(&mut self, w: u64) {
        self.cur += w;
        self.peak = self.peak.max(self.cur);
        self.peak_buffers = self.peak_buffers.max(self.cur);
    }
    /// A block of `w` words was released.
    pub(crate) fn sub(&mut self, w: u64) {
        self.cur = self.cur.saturating_sub(w);
    }
    /// Something of `transient` words exists for a moment (counts toward both peaks).
    pub(crate) fn touch(&mut self, transient: u64) {
        self.peak = self.peak.max(self.cur + transient);
        self.peak_buffers = self.peak_buffers.max(self.cur + transient);
    }
    /// Message buffers of `transient` words exist for a moment (the buffer peak only).
    pub(crate) fn touch_buffers(&mut self, transient: u64) {
        self.peak_buffers = self.peak_buffers.max(self.cur + transient);
    }
}
