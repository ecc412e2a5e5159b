// Package backlog is the mode policy of sluice: whether a keyed operator of a task is in
// backlog mode (its input lag is high: it sorts and folds silently, batch-like) or in real-time
// mode (it emits with low latency), and when a change of mode needs a checkpoint or a fold. It
// owns the rules; the task (operators/task) gathers their inputs, asks, and applies the answer
// (entering or leaving backlog, the checkpoint, the fold, the log lines and metrics). Everything
// here is pure or owned by one goroutine: nothing in it is safe for concurrent use, and none of
// it needs to be (a task's goroutine owns its detectors and asks the policy itself).
//
// # Thresholds: the Detector
//
// An input is a backlog while its consumer lag (end offset, or last stable offset under
// read_committed, minus the next offset to process) is high: after downtime, a deployment, a
// replay or a bootstrap. A Detector judges one input of a task with hysteresis: it enters at lag
// >= EnterLag (or time lag >= EnterTimeLag when set) and leaves at lag <= ExitLag (and time lag
// <= ExitTimeLag when set), so an input near the threshold does not flap. Mode never never says
// backlog; mode always says backlog from its first observation (unless the input has caught up
// already: the exit criteria hold) until the input has caught up once, then never again. A bounded run (Options.Bounded, sluice run --bounded) is a batch
// job: its detectors behave as mode always whatever backlog.mode says (the configuration keeps
// the mode it was given). Each keyed chain of a task owns a Detector for its input; a chain that
// re-keys into a repartition topic owns one too, for the mode it announces there. After an
// abort a chain starts over with a fresh detector (Detector.Fresh): its mode is decided again
// from the next lag it sees.
//
// # Which lag judges a batch
//
// A fetch tells, for each batch, the lag before it (the batch included) and after it (Lag).
// Before a batch (Lag.BeforeBatch), an input that has not seen a batch yet (since the task
// started or was rewound), or whose operator is in backlog, judges by what is left including the
// batch: a backlog may arrive in one fetch, and the last batch of a backlog is still sorted. A
// streaming input enters backlog only if what lies beyond the batch is a backlog too: a batch
// that grew while the task waited in a checkpoint does not make it flap. After the batch
// (Lag.AfterBatch), what is left decides whether it leaves backlog, so a task leaves when its
// input stops.
//
// # The combiner rule
//
// RecordAttributes is the mode of an input (Flink's RecordAttributes{isBacklog},
// FLIP-309/325/327). An operator of several inputs (a cogroup, a stream-stream join), or one
// reading an internal topic (a repartition topic, or the results of a keyed operator upstream),
// is in backlog while any of its inputs is, by its own detector or by the word of the writers of
// an internal topic it reads (Combine over State.Detectors and State.Upstream). Between the
// stages of a pipeline the mode travels in-band, as attribute records in the internal topics
// (operators/task/attributes.go): a batch in which a writer was in backlog at any point runs in
// backlog (so the burst a keyed operator writes at its switch is sorted downstream too), and
// after the batch what the writers said last counts.
//
// # The decision
//
// Decide takes what the task knows of one keyed operator (State) when it observes a lag of one
// of its inputs, and when it checkpoints, and returns a Decision:
//
//   - Start: the first observation of an operator of one input that is not an internal topic's
//     reader finds a backlog. The task starts in backlog mode; that is not a switch (it is not
//     counted in sluice_backlog_switches_total). The first entry of an operator of several
//     inputs, or of a reader of an internal topic, is an Enter like any later one.
//   - Enter: the inputs say backlog and the operator streams. It enters backlog now; if its
//     cache holds dirty entries, a checkpoint flushes them first (Checkpoint).
//   - Leave: the inputs say real-time, the operator is in backlog and holds nothing of it (no
//     sorted records, no pre-aggregated keys, no outputs owed by backlog checkpoints): it leaves
//     now, and needs a checkpoint only if it runs on event time (the checkpoint fires the timers
//     its watermark reached). With something to fold it stays in backlog until the fold: the
//     decision asks for a checkpoint, and Fold says when the fold is due.
//   - Stay: no change. A first observation that finds the operator streaming while backlog
//     checkpoints of an earlier owner, or before an abort, left outputs owed still asks for a
//     checkpoint: those are emitted (folded) before it streams.
//
// Fold (the switch's fold, its expensive part, which Task.Prepare may do ahead of the
// checkpoint) is due when the operator's cache is clean, its inputs say real-time or have ended,
// and it holds a backlog or owes outputs of backlog checkpoints (or is in backlog when its
// input ended: the end of a bounded run's input ends every backlog). The operator leaves
// backlog when the checkpoint holding the fold commits. An input that has ended never enters
// backlog again.
//
// SilentFold says an operator may fold its backlog without outputs and stay in backlog (a
// backlog checkpoint, backlog.checkpoint_interval, which bounds the re-work after a crash): it is
// in backlog, its inputs still say so and have not ended, and it holds records of the backlog. The task does it once
// the interval has passed since the last.
//
// Streams (State.Streams) says the operator streams: real-time, nothing of a backlog left to fold
// and no outputs owed. Only then are its windows out as its watermark closes them (a writer of
// timed results announces its output watermark then, or in the checkpoint of the switch that
// ends a backlog, never during one), and a checkpoint fires the timers a watermark moved by a
// writer's announcement reached.
package backlog
