// Golden prints the events of Flink Nexmark's own generator (github.com/nexmark/nexmark,
// nexmark-flink/.../generator), unmodified except that its three SplittableRandoms are seeded
// (see golden.sh), in the JSON of nexmark.Event.AppendJSON, for generator_test.go to compare
// the Go port with:
//
//	seed <seed> base <baseTime>
//	event <i> <json>          for the first -Dnexmark.show events
//	sha256 <n> <hex>          of the first n events' JSON lines (each ending in '\n')
//
// Run by golden.sh; one seed per JVM, as the static randoms are drawn at class initialization.
import com.github.nexmark.flink.NexmarkConfiguration;
import com.github.nexmark.flink.generator.GeneratorConfig;
import com.github.nexmark.flink.generator.NexmarkGenerator;
import com.github.nexmark.flink.model.Auction;
import com.github.nexmark.flink.model.Bid;
import com.github.nexmark.flink.model.Event;
import com.github.nexmark.flink.model.Person;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;

public class Golden {
	public static void main(String[] args) throws Exception {
		long seed = Long.getLong("nexmark.seed");
		long base = Long.getLong("nexmark.base");
		int show = Integer.getInteger("nexmark.show");
		String[] ns = System.getProperty("nexmark.sha").split(",");
		long max = Long.parseLong(ns[ns.length - 1]);

		NexmarkConfiguration conf = new NexmarkConfiguration(); // Flink's defaults
		// As NexmarkTableSourceFactory: first event id 1, first event number 1.
		GeneratorConfig cfg = new GeneratorConfig(conf, base, 1, max, conf.stopAtEvent, 1);
		NexmarkGenerator gen = new NexmarkGenerator(cfg);
		MessageDigest sha = MessageDigest.getInstance("SHA-256");
		StringBuilder out = new StringBuilder();
		out.append("seed ").append(seed).append(" base ").append(base).append('\n');
		int next = 0;
		for (long i = 0; gen.hasNext(); i++) {
			String json = json(gen.next().event);
			sha.update((json + "\n").getBytes(StandardCharsets.UTF_8));
			if (i < show) {
				out.append("event ").append(i).append(' ').append(json).append('\n');
			}
			if (i + 1 == Long.parseLong(ns[next])) {
				MessageDigest done = (MessageDigest) sha.clone();
				StringBuilder hex = new StringBuilder();
				for (byte b : done.digest()) {
					hex.append(String.format("%02x", b));
				}
				out.append("sha256 ").append(i + 1).append(' ').append(hex).append('\n');
				next++;
			}
		}
		System.out.print(out);
	}

	static String json(Event e) {
		StringBuilder b = new StringBuilder();
		if (e.newPerson != null) {
			Person p = e.newPerson;
			b.append("{\"id\":").append(p.id);
			str(b.append(",\"name\":"), p.name);
			str(b.append(",\"emailAddress\":"), p.emailAddress);
			str(b.append(",\"creditCard\":"), p.creditCard);
			str(b.append(",\"city\":"), p.city);
			str(b.append(",\"state\":"), p.state);
			b.append(",\"dateTime\":").append(p.dateTime.toEpochMilli());
			str(b.append(",\"extra\":"), p.extra);
		} else if (e.newAuction != null) {
			Auction a = e.newAuction;
			b.append("{\"id\":").append(a.id);
			str(b.append(",\"itemName\":"), a.itemName);
			str(b.append(",\"description\":"), a.description);
			b.append(",\"initialBid\":").append(a.initialBid);
			b.append(",\"reserve\":").append(a.reserve);
			b.append(",\"dateTime\":").append(a.dateTime.toEpochMilli());
			b.append(",\"expires\":").append(a.expires.toEpochMilli());
			b.append(",\"seller\":").append(a.seller);
			b.append(",\"category\":").append(a.category);
			str(b.append(",\"extra\":"), a.extra);
		} else {
			Bid x = e.bid;
			b.append("{\"auction\":").append(x.auction);
			b.append(",\"bidder\":").append(x.bidder);
			b.append(",\"price\":").append(x.price);
			str(b.append(",\"channel\":"), x.channel);
			str(b.append(",\"url\":"), x.url);
			b.append(",\"dateTime\":").append(x.dateTime.toEpochMilli());
			str(b.append(",\"extra\":"), x.extra);
		}
		return b.append('}').toString();
	}

	// str appends s as nexmark.appendString does (the generator's strings are ASCII).
	static void str(StringBuilder b, String s) {
		b.append('"');
		for (int i = 0; i < s.length(); i++) {
			char c = s.charAt(i);
			if (c == '"' || c == '\\') {
				b.append('\\').append(c);
			} else if (c == '\n') {
				b.append("\\n");
			} else if (c == '\r') {
				b.append("\\r");
			} else if (c == '\t') {
				b.append("\\t");
			} else if (c < ' ') {
				b.append(String.format("\\u%04x", (int) c));
			} else {
				b.append(c);
			}
		}
		b.append('"');
	}
}
