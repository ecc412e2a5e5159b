#!/usr/bin/env bash
# Regenerates ../flink_golden.txt from Flink Nexmark's Java generator, for generator_test.go's
# TestGoldenFlink. Usage: golden.sh NEXMARK_CHECKOUT (a clone of github.com/nexmark/nexmark).
#
# The generator's sources are compiled unmodified except for one edit per file, which seeds the
# SplittableRandoms Flink leaves unseeded, as nexmark.Config.Seed documents:
#   NexmarkGenerator.random            new SplittableRandom(seed)
#   BidGenerator.random (static)       new SplittableRandom(seed + 1)
#   StringsGenerator's reusable extra  new SplittableRandom(seed + 2)
# Their few Flink, Jackson and SLF4J imports are satisfied by the stubs written below.
set -euo pipefail
src=${1:?usage: golden.sh NEXMARK_CHECKOUT}/nexmark-flink/src/main/java/com/github/nexmark/flink
here=$(cd "$(dirname "$0")" && pwd)
out=$here/../flink_golden.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

pkg=$work/src/com/github/nexmark/flink
mkdir -p "$pkg/generator/model" "$pkg/model" "$pkg/utils"
cp "$src"/NexmarkConfiguration.java "$pkg/"
cp "$src"/utils/NexmarkUtils.java "$pkg/utils/"
cp "$src"/generator/GeneratorConfig.java "$src"/generator/NexmarkGenerator.java "$pkg/generator/"
cp "$src"/generator/model/*.java "$pkg/generator/model/"
cp "$src"/model/{Person,Auction,Bid,Event}.java "$pkg/model/"

seed() { # file, exact Java text, replacement
	local n
	n=$(grep -cF -- "$2" "$1" || true)
	[ "$n" = 1 ] || { echo "golden.sh: expected one '$2' in $1, found $n" >&2; exit 1; }
	python3 - "$1" "$2" "$3" <<'PY'
import sys
p, old, new = sys.argv[1:]
s = open(p).read()
open(p, "w").write(s.replace(old, new))
PY
}
seed "$pkg/generator/NexmarkGenerator.java" 'new SplittableRandom();' 'new SplittableRandom(Long.getLong("nexmark.seed"));'
seed "$pkg/generator/model/BidGenerator.java" 'new SplittableRandom();' 'new SplittableRandom(Long.getLong("nexmark.seed") + 1);'
seed "$pkg/generator/model/StringsGenerator.java" 'new SplittableRandom()' 'new SplittableRandom(Long.getLong("nexmark.seed") + 2)'

stub() { mkdir -p "$(dirname "$work/src/$1")"; cat > "$work/src/$1"; }
stub org/apache/flink/util/Preconditions.java <<'J'
package org.apache.flink.util;
public final class Preconditions {
	public static <T> T checkNotNull(T t) { if (t == null) throw new NullPointerException(); return t; }
}
J
stub javax/annotation/Nullable.java <<'J'
package javax.annotation;
public @interface Nullable {}
J
stub org/apache/flink/shaded/jackson2/com/fasterxml/jackson/annotation/JsonProperty.java <<'J'
package org.apache.flink.shaded.jackson2.com.fasterxml.jackson.annotation;
public @interface JsonProperty {}
J
stub org/apache/flink/shaded/jackson2/com/fasterxml/jackson/core/JsonProcessingException.java <<'J'
package org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core;
public class JsonProcessingException extends Exception {}
J
stub org/apache/flink/shaded/jackson2/com/fasterxml/jackson/databind/ObjectMapper.java <<'J'
package org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind;
public class ObjectMapper {
	public String writeValueAsString(Object o) throws org.apache.flink.shaded.jackson2.com.fasterxml.jackson.core.JsonProcessingException { return "?"; }
}
J
stub org/slf4j/Logger.java <<'J'
package org.slf4j;
public interface Logger {}
J
stub org/slf4j/LoggerFactory.java <<'J'
package org.slf4j;
public final class LoggerFactory { public static Logger getLogger(Class<?> c) { return new Logger() {}; } }
J
cp "$here/Golden.java" "$work/src/"

mkdir -p "$work/classes"
javac -nowarn -d "$work/classes" $(find "$work/src" -name '*.java') 2>&1 | grep -v '^Note:' || true
{
	echo "# Flink Nexmark's generator (nexmark/nexmark ${NEXMARK_REV:-$(git -C "$1" rev-parse --short HEAD 2>/dev/null || echo "?")}, seeded), by testdata/java/golden.sh; $(java -version 2>&1 | head -1)"
	for s in 42 7; do
		java -cp "$work/classes" -Dnexmark.seed=$s -Dnexmark.base=1436918400000 -Dnexmark.show=$([ $s = 42 ] && echo 60 || echo 10) \
			-Dnexmark.sha=1000,100000,1000000 Golden
	done
} > "$out"
echo "wrote $out"
