// `--log-format text`: what a person reading `kubectl logs` sees for the records pino writes.
import { Writable } from "node:stream";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { textDestination } from "../../src/runtime/log-format.js";

function textLogger(level = "info") {
  const lines: string[] = [];
  const out = new Writable({
    write(chunk, _encoding, done) {
      lines.push(...String(chunk).split("\n").filter(Boolean));
      done();
    },
  });
  return { log: pino({ level, base: null }, textDestination(out)), lines };
}

describe("the text log format", () => {
  it("writes time, level and message, then the fields as key=value", () => {
    const { log, lines } = textLogger();
    log.info({ namespace: "ops", name: "nightly", pod: "nightly-1", attempt: 1 }, "Created Pod");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO {2}Created Pod namespace=ops name=nightly pod=nightly-1 attempt=1$/,
    );
  });

  it("quotes values with spaces, and keeps lists and objects on the line", () => {
    const { log, lines } = textLogger();
    log.warn(
      { key: "ops/nightly", err: 'conflict: "x" changed', namespaces: ["a", "b"] },
      "Reconcile failed",
    );
    expect(lines[0]).toContain(
      'WARN  Reconcile failed key=ops/nightly err="conflict: \\"x\\" changed" namespaces=["a","b"]',
    );
  });

  it("shows an Error by its message, on one line", () => {
    const { log, lines } = textLogger();
    log.error({ err: new Error("lost the leader Lease\nsecond line") }, "Stopped");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('ERROR Stopped err="lost the leader Lease\\nsecond line"');
  });

  it("honours the level", () => {
    const { log, lines } = textLogger("warn");
    log.info("Caches synced");
    log.debug("Pod already existed");
    log.warn("Second signal, exiting at once");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain("WARN  Second signal, exiting at once");
  });
});
