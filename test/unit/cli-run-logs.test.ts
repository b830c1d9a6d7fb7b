// The log API's lines with `timestamps=true`, as `submit --watch` and `logs` read them: the time
// the kubelet took each line, and keys that sort as the times do whatever their precision, so a
// stream opened again from the last line's time skips exactly what was already shown.
import { describe, expect, it } from "vitest";
import { splitTimestamp } from "../../src/cli/cluster/run-logs.js";

describe("log lines with their timestamps", () => {
  it("splits the kubelet's timestamp from the line, spaces in the line kept", () => {
    const { line, stamp } = splitTimestamp("2026-12-01T23:37:39.123456789Z [build] make  all");
    expect(line).toEqual({ text: "[build] make  all", at: Date.parse("2026-12-01T23:37:39.123Z") });
    expect(stamp).toBe("2026-12-01T23:37:39.123456789Z");
  });

  it("orders times of any precision (RFC 3339 drops trailing zeros)", () => {
    const stamps = [
      "2026-12-01T23:37:39Z",
      "2026-12-01T23:37:39.0000001Z",
      "2026-12-01T23:37:39.1Z",
      "2026-12-01T23:37:39.12Z",
      "2026-12-01T23:37:39.123456789Z",
      "2026-12-01T23:37:40.5Z",
    ];
    const keys = stamps.map((stamp) => splitTimestamp(`${stamp} x`).key);
    expect([...keys].sort()).toEqual(keys);
    expect(new Set(keys).size).toBe(keys.length);
  });

  it("keeps a line without a timestamp whole", () => {
    expect(splitTimestamp("no time here")).toMatchObject({ key: "", line: { text: "no time here" } });
  });
});
