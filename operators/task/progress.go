package task

import "slices"

// progress is how far a chain has got, as a commit makes it durable and an abort returns to it:
// the next offset to process, the watermarks the chain keeps, what it announced as a writer and
// what it knows of its writers. A chain keeps where its last commit left it in chain.done; where
// it is now lives in its working fields (next, iwm, said, wmSaid, idleSaid, writers, and its
// operator's wm). A checkpoint computes each chain's next progress (Pending.next) from done and
// what it writes; Committed makes it done in one assignment; Aborted drops it and sets the
// working fields back to done (rewind). A field of progress forgotten in one of those three
// places is the kind of bug this type exists to prevent: keep them here.
type progress struct {
	off int64 // next offset covered: everything before it is done (-1: not started)
	// wm is the operator's watermark, on its primary chain's progress only (opState.wm is
	// shared by a cogroup's chains; committedWM).
	wm  int64
	iwm int64 // the input's watermark

	// A writer's announcements (attributes.go).
	said     int8
	wmSaid   int64
	idleSaid bool

	writers []writerMark // a reader of timed results: what each writer announced
}

// committedWM is the operator's watermark at its last commit.
func (o *opState) committedWM() int64 { return o.chains[0].done.wm }

// nextProgress starts the progress checkpoint pd commits for c: c's done, with the offset it
// moves to (off). The checkpoint's watermark writes (checkpointWatermark) and announcements
// (sealProgress) fill in the rest.
func (pd *Pending) nextProgress(c *chain, off int64) *progress {
	n := c.done
	n.off = off
	n.writers = slices.Clone(c.done.writers)
	pd.next[c] = &n
	return &n
}

// sealProgress records, at the end of checkpoint pd, what each chain announced: the
// announcements are in the transaction, so they are committed or aborted with it.
func (pd *Pending) sealProgress() {
	for c, n := range pd.next {
		n.said, n.wmSaid, n.idleSaid = c.said, c.wmSaid, c.idleSaid
	}
}

// commitProgress makes the progress of checkpoint pd each chain's done.
func (pd *Pending) commitProgress() {
	for c, n := range pd.next {
		c.done = *n
	}
}

// rewindAnnouncements sets c's announcements back to its last commit's: those since were in an
// aborted transaction, and the next observation repeats them.
func (c *chain) rewindAnnouncements() {
	c.said, c.wmSaid, c.idleSaid = c.done.said, c.done.wmSaid, c.done.idleSaid
}

// rewind sets c's working progress back to its last commit's after an abort.
func (c *chain) rewind() {
	c.rewindAnnouncements()
	if c.comb != nil {
		c.comb.reset()
	}
	if c.own != nil {
		c.own.reset()
	}
	if c.tracksTime() {
		// The watermark goes back with the offset: a re-keying writer would otherwise announce
		// the watermark of records it has not written again yet, and its readers would take the
		// records it writes again as late.
		c.wm = c.committedWM()
		c.iwm = c.done.iwm
		c.tm.reset()
	}
	if c.writers != nil {
		copy(c.writers, c.done.writers)
		c.iwm = max(c.done.iwm, minWriter(c.writers))
	}
	if c.done.off >= 0 {
		c.next = c.done.off
	}
}
