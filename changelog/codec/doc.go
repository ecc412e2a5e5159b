// Package codec owns every byte layout sluice writes beside user data: the names of the state
// namespaces it reserves, the store keys it makes (timer keys, window keys, watermark keys,
// layout keys), the values the runtime stores (a Keyed operator's value with its timer prefix,
// watermarks, writers' marks), and every record header sluice writes or reads (changelog
// records, attribute records of internal topics, dead letters, records too large for their
// topic). Each encoder sits beside its decoder; the tests round-trip each pair and pin the
// bytes. These layouts are persistent (Pebble, compacted changelog topics) or a user contract
// (header keys and values): change none of them without a migration.
//
// What the task (operators/task) and the restore (changelog.Restorer) write and read:
//
//	layout                           bytes                                          written by            read by
//	namespace <op>                   the operator's states (key = group key or       task checkpoint,      task, restore
//	                                 window key; value = aggregate state, or         restore
//	                                 AppendKeyed for a Keyed operator)
//	namespace <op>#pending           PendingNamespace: key -> empty (output owed)    backlog checkpoint,   task switch fold
//	                                                                                 restore
//	namespace <op>#watermark         WatermarkNamespace: WatermarkKey,               task checkpoint,      task restore
//	                                 InputWatermarkKey, WriterWatermarkKey ->        restore               (restoreWindows)
//	                                 AppendWatermark / AppendWriterMark
//	namespace <op>#timers            TimerNamespace: AppendTimerKey -> empty         task (rebuilt from    task timers
//	                                                                                 states at start)
//	namespace <op>#layout            LayoutNamespace: LayoutFingerprintKey,          task.New              task.New
//	                                 LayoutTextKey -> fingerprint, text
//	namespace <table>#table          TableNamespace: a table's rows                  task (ProcessTable)   task joins
//	reset                            OwnedBy: <op> and every <op>#...                -                     sluice reset
//	window key                       group key, then start (8 bytes, big-endian,     task                  task
//	                                 sign bit flipped): AppendWindowKey
//	timer key                        close time (8 bytes, big-endian, sign bit       task                  task
//	                                 flipped), then the key: AppendTimerKey
//	Keyed value                      flag (1: timer set), timer (8 bytes,            task                  task, restore
//	                                 big-endian), state: AppendKeyed                                       (ValidState)
//	watermark value                  8 bytes, big-endian: AppendWatermark            task                  task, restore
//	writer mark                      8 bytes, big-endian, + byte 1 if idle:          task                  task, restore
//	                                 AppendWriterMark
//	changelog state record           key, value as stored; HeaderLayout              task checkpoint       restore (apply)
//	                                 (fingerprint); + HeaderPending "1" from a       (ChangelogHeaders)
//	                                 backlog checkpoint
//	changelog watermark record       a watermark key and value; HeaderWatermark ""   task checkpoint       restore (apply:
//	                                 (WatermarkRecordHeaders)                                              ValidWatermarkRecord)
//	attribute record                 no key, no value; HeaderWriter (partition)      task writer           task reader
//	                                 + HeaderBacklog "true"/"false" (ModeHeaders)    (announce)            (ParseAttribute)
//	                                 or HeaderWatermark decimal / IdleMark
//	                                 (MarkHeaders)
//	partial state record             the group key; a Mergeable state;               task combining        task reader
//	(repartition topic)              HeaderPartial (fingerprint): PartialHeaders     writer (flush)        (PartialOf)
//	dead letter                      the input's key and value (cut); HeaderError,   task                  users; task
//	                                 HeaderOperator, HeaderSource*, HeaderOriginal*                        (DeadLetterSource)
//	                                 sizes; a late record's HeaderWatermark
//	dead letter of a record too      the record's key and value (cut); HeaderError,  task (LimitSizes)     users
//	large for its topic              HeaderOperator, HeaderDestinationTopic
//
// The store's own framing of namespaces and offsets (state.Store) belongs to package state.
// Everything here is a pure function or a constant: safe for concurrent use. Encoders append
// to the dst they are given (or return new memory); decoders return sub-slices of their input,
// which the caller owns.
package codec
