// The secret mask: each value prints as `***` however its bytes are split, and only its bytes.
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  createSecretMask,
  maskDirsOf,
  readMaskDirs,
  type StreamMask,
} from "../../src/pod-runner/secret-mask.js";

function through(mask: StreamMask, pieces: readonly string[]): string {
  const out = pieces.map((piece) => mask.push(Buffer.from(piece)));
  out.push(mask.end());
  return Buffer.concat(out).toString();
}

/** The text cut at `cuts` (ascending offsets). */
function cut(text: string, cuts: readonly number[]): string[] {
  const pieces: string[] = [];
  let from = 0;
  for (const at of cuts) {
    pieces.push(text.slice(from, at));
    from = at;
  }
  pieces.push(text.slice(from));
  return pieces;
}

describe("secret mask", () => {
  const secret = "s3cr3t-Value-0123456789abcdefXYZ";

  it.each([
    ["a value alone", "s3cr3t-Value-0123456789abcdefXYZ", "***"],
    ["a value inside a line", "token=s3cr3t-Value-0123456789abcdefXYZ;\n", "token=***;\n"],
    ["a value twice", "s3cr3t-Value-0123456789abcdefXYZ s3cr3t-Value-0123456789abcdefXYZ\n", "*** ***\n"],
    ["a value after a progress redraw", "10%\rs3cr3t-Value-0123456789abcdefXYZ 20%\r", "10%\r*** 20%\r"],
    ["the start of a value only", "s3cr3t-Value-01234 done\n", "s3cr3t-Value-01234 done\n"],
    ["a value's start at the stream's end", "s3cr3t-Val", "s3cr3t-Val"],
  ])("masks %s", (_, text, shown) => {
    expect(through(createSecretMask([secret]).stream(), [text])).toBe(shown);
  });

  it("masks the same however the output is cut in two, at every byte offset", () => {
    const text = `begin s3cr3t-Value-0123456789abcdefXYZ\r[50%] s3cr3t-Value-0123456789abcdefXYZs3cr3t-Val end\n`;
    const whole = through(createSecretMask([secret]).stream(), [text]);
    expect(whole).toBe("begin ***\r[50%] ***s3cr3t-Val end\n");
    for (let at = 0; at <= text.length; at++) {
      expect(through(createSecretMask([secret]).stream(), cut(text, [at])), `cut at ${at}`).toBe(whole);
    }
  });

  it("masks the same when every byte comes on its own", () => {
    const text = `x s3cr3t-Value-0123456789abcdefXYZ y s3cr3t-Value-0123456789abcdefXY z\n`;
    const bytes = [...text].map((char) => char);
    expect(through(createSecretMask([secret]).stream(), bytes)).toBe(
      "x *** y s3cr3t-Value-0123456789abcdefXY z\n",
    );
  });

  it("masks overlapping values as one, however they are cut", () => {
    const values = ["abcdef", "defghi", "ghijkl"];
    const text = "<abcdefghijkl> <abcdefghi> <abcdefX>\n";
    const whole = through(createSecretMask(values).stream(), [text]);
    expect(whole).toBe("<***> <***> <***X>\n");
    for (let a = 0; a <= text.length; a++) {
      for (let b = a; b <= text.length; b++) {
        expect(through(createSecretMask(values).stream(), cut(text, [a, b])), `cut at ${a}, ${b}`).toBe(
          whole,
        );
      }
    }
  });

  it("masks a run of a repeating value as one, however it is cut", () => {
    const text = `x${"a".repeat(70_000)}y aaa\n`;
    const whole = through(createSecretMask(["aaaa", "aaab"]).stream(), [text]);
    expect(whole).toBe("x***y aaa\n");
    for (const at of [1, 2, 3, 4, 5, 65_536, 70_000, 70_001, 70_002]) {
      expect(through(createSecretMask(["aaaa", "aaab"]).stream(), cut(text, [at])), `cut at ${at}`).toBe(
        whole,
      );
    }
  });

  it("masks the longest value where a shorter one is its start, leaving none of it shown", () => {
    const mask = createSecretMask(["pass", "password1"]);
    expect(mask.text("pass password1 password2\n")).toBe("*** *** ***word2\n");
    expect(through(mask.stream(), ["pass", "wor", "d1!\n"])).toBe("***!\n");
  });

  it("masks a multi-line value line by line, and leaves values shorter than 4 characters", () => {
    const mask = createSecretMask(["-----BEGIN KEY-----\r\nMIIEvQIBADANBg\nabc\n", "xyz", "     "]);
    expect(mask.text("-----BEGIN KEY-----\nMIIEvQIBADANBg\nabc xyz     .\n")).toBe(
      "***\n***\nabc xyz     .\n",
    );
  });

  it("passes the chunk itself when no value is in it, and bytes as they are with no values", () => {
    const chunk = Buffer.from("nothing secret here\n");
    expect(createSecretMask([secret]).stream().push(chunk)).toBe(chunk);
    const none = createSecretMask(["ab", ""]);
    expect(none.active).toBe(false);
    expect(none.stream().push(chunk)).toBe(chunk);
  });

  it("gives out a buffer of its own for each masked chunk, never one shared between them", () => {
    // Downstream a chunk is told apart by identity (output.ts's linesOf) and may be freed.
    const stream = createSecretMask([secret]).stream();
    const first = stream.push(Buffer.from(`${secret}\n`).subarray(0, secret.length));
    const second = stream.push(Buffer.from(`\n${secret}`));
    expect([first.toString(), second.toString()]).toEqual(["***", "\n***"]);
    const again = createSecretMask([secret]).stream().push(Buffer.from(secret));
    expect(again.toString()).toBe("***");
    expect(again).not.toBe(first);
  });

  it("holds back no more than a value's start, and nothing past a byte no value has", () => {
    const stream = createSecretMask([secret]).stream();
    expect(stream.push(Buffer.from("line one\ns3cr3t-Va")).toString()).toBe("line one\n");
    expect(stream.push(Buffer.from("lue!")).toString()).toBe("s3cr3t-Value!");
    expect(stream.end().length).toBe(0);
  });

  it("masks bytes that are no valid UTF-8 around a value, leaving them as they are", () => {
    const stream = createSecretMask([secret]).stream();
    const out = Buffer.concat([
      stream.push(Buffer.from([0xff, 0xfe, ...Buffer.from("s3cr3t-Value-0123")])),
      stream.push(Buffer.from([...Buffer.from("456789abcdefXYZ"), 0xc3])),
      stream.end(),
    ]);
    expect(out).toEqual(Buffer.from([0xff, 0xfe, ...Buffer.from("***"), 0xc3]));
  });
});

describe("mask directories", () => {
  it("reads each regular file up to 4 KiB under the directories, a secret volume's layout too", () => {
    const root = mkdtempSync(join(tmpdir(), "mask-dirs-"));
    const volume = join(root, "db");
    mkdirSync(join(volume, "..2026_12_07_01_00_00.1"), { recursive: true });
    writeFileSync(join(volume, "..2026_12_07_01_00_00.1", "password"), "hunter2-db\n");
    symlinkSync("..2026_12_07_01_00_00.1", join(volume, "..data"));
    symlinkSync("..data/password", join(volume, "password"));
    const other = join(root, "api");
    mkdirSync(other);
    writeFileSync(join(other, "token"), "line-one\nline-two\n");
    writeFileSync(join(other, "big"), "x".repeat(4097));
    const values = readMaskDirs(maskDirsOf({ PLAYBOOK_MASK_DIRS: `${volume}::${other}` }));
    expect(values.sort()).toEqual(["hunter2-db\n", "line-one\nline-two\n"]);
  });

  it("refuses a directory it cannot read, naming the variable and the directory", () => {
    expect(() => readMaskDirs(["/nonexistent/mask-dir"])).toThrow(
      'PLAYBOOK_MASK_DIRS: cannot read the directory "/nonexistent/mask-dir" (ENOENT)',
    );
  });
});
