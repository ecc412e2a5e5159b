// Package state owns sluice's local operator state: one Pebble database per process (under
// processing.state_dir) holding every operator's keyed state, and, beside each operator's state
// for one partition, the changelog offset that this state reflects.
//
// # Model
//
// State is addressed by a Namespace (operator name, partition) and a key. For each namespace the
// store also keeps one int64: the next changelog offset to replay from. The runtime writes a
// namespace's state changes and its new offset in the same Batch, so the two can never disagree.
// After a crash the runtime reads Offset and replays the changelog from there; when the stored
// offset is unusable (ahead of the changelog, or missing), it calls Drop and restores in full.
//
// The write-back cache and the "what is dirty" logic belong to the task runtime, not to this
// package: a Store only reads, writes atomically, bulk-loads and scans.
//
// Two implementations satisfy Store: *DB (Pebble, the product) and *Mem (an in-memory model for
// tests). One test suite runs over both.
//
// # Concurrency and memory
//
// A Store is safe for concurrent use; the process shares one, and each task touches only its own
// namespaces. No lock is held while a call is in Pebble or while a Scan's callback runs: each
// store counts its calls in flight in one atomic word, with a closed bit (gate.go), and only Close
// ever waits on it. So a call made from inside another never blocks: a Scan's callback may Get
// (the runtime's timer and window sweeps do), and other calls go on while an Iter is open. Close
// refuses new calls (ErrClosed), waits until the calls in flight have returned (a running Scan,
// its callback included, and an unfinished Iter), then closes Pebble. What a Scan sees when Close
// begins under it: the calls its callback makes from then on return ErrClosed, and the Scan
// returns ErrClosed before its next key (an Iter's Next returns false, Err ErrClosed). Close must
// therefore not be called from a Scan's callback, nor by a goroutine holding an unfinished Iter.
// A Batch, a Loader and an Iter each belong to one goroutine. Get's result belongs to the caller;
// the key and value a Scan passes to its callback are valid during the call, an Iter's until its
// next Next or Close.
//
// # Key layout
//
// Every Pebble key starts with a one-byte tag:
//
//	'm' + name                                      store metadata (the format version)
//	'n' + operator + 0x00 + partition(4, BE) + 'o'  the namespace's changelog offset (8 bytes, BE)
//	'n' + operator + 0x00 + partition(4, BE) + 's' + key   one state entry
//
// Operator names may not contain 0x00 and partitions are non-negative, so the namespace prefix
// 'n' + operator + 0x00 + partition is prefix-free: operator "a" partition 1, "a" partition 10 and
// "ab" partition 1 occupy disjoint ranges. A namespace's state keys form the single contiguous
// range [prefix+'s', prefix+'t'), which Scan iterates, Drop deletes with one DeleteRange and the
// loader writes into its sstables; within it, state keys sort exactly as the user keys do. The
// offset key sorts apart, just before that range, so it is never seen by Scan, never overlaps the
// loader's state sstables, and never interleaves with state keys.
//
// # Durability
//
// The Kafka transaction is the source of truth; Pebble may lag behind it. Options.Sync defaults to
// false, so batches commit with pebble.NoSync: a crash (of the process or the machine) may lose
// the last batches. That is safe because a namespace's state and its offset are written in the
// same batch and Pebble recovers its write-ahead log as a prefix of the committed batches: after a
// crash each namespace holds the state and the offset of the same (possibly older) batch, so the
// offset never claims more than the state holds. The runtime then replays the changelog from that
// older offset; changelog records carry full values, so replaying records that were already
// applied is idempotent. Set Options.Sync to fsync every commit when a shorter replay after a
// machine crash is worth the latency. TestCrash checks all of this on a crashable file system.
//
// # Bulk loads
//
// A Loader writes one namespace's keys, in strictly increasing order, into sstable files under
// <Dir>/ingest/, starting a new file every 64 MiB, so memory stays bounded whatever the number of
// keys. Commit finishes and fsyncs the files, writes the offset (if set) into one more one-key
// sstable, and ingests them all with one DB.Ingest call. The offset is in the ingest, not in a
// batch applied after it, because Pebble ingests a set of sstables atomically ("semantically
// equivalent to a single batch"): state and offset become visible, and durable, together. The
// files cannot overlap (keys increase, and the offset key sorts just below the state range).
// Before ingesting, Commit syncs the write-ahead log (one empty synced record), so that every
// batch committed before the load is durable when the load is: a crash can never keep the load
// and lose an older batch whose keys the load did not overwrite. Leftover files of a load
// interrupted by a crash are removed by the next Open. Ingested keys overwrite existing keys;
// keys the load does not mention keep their values.
//
// # Files
//
// Options.Dir holds <Dir>/pebble (the Pebble database) and <Dir>/ingest (loader scratch files).
// Open fsyncs Dir and its parent, so the store's directory entries survive a machine crash.
//
// # Faults
//
// Errors name the store's directory. A write Pebble cannot make (disk full, a read-only or
// failing file system) fails the call; a failed write-ahead log or MANIFEST write, which Pebble
// treats as fatal, fails the call with ErrFailed and the store with it (fault.go). Damaged
// files (a checksum mismatch, a missing or truncated file, a MANIFEST that does not read to its
// end) make Open return ErrDamaged; MoveAside puts the store aside so that an empty one opens
// and the runtime restores it from the changelog. Damage found by a read fails the store with
// ErrDamaged and leaves a DAMAGED marker that the next Open reports.
package state
