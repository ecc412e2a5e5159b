package producer

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// slogAdapter sends franz-go's logs to slog at a level one step quieter than franz-go's (its
// Info is chatty about rebalances; we keep those at debug).
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Level() kgo.LogLevel {
	switch {
	case a.l.Enabled(context.Background(), slog.LevelDebug):
		return kgo.LogLevelInfo
	default:
		return kgo.LogLevelWarn
	}
}

func (a slogAdapter) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lv = slog.LevelError
	case kgo.LogLevelWarn:
		lv = slog.LevelWarn
	}
	a.l.Log(context.Background(), lv, "kafka: "+msg, keyvals...)
}

func kerrFor(code int16) error { return kerr.ErrorForCode(code) }
