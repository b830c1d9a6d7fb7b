// What became of the chunks a launcher's streams gave: the tests of spent-chunks.ts keep a
// reference to each, as a second reader would, and look whether the attempt freed it.
import type { Launcher } from "../../src/pod-runner/launcher.js";

/** `launcher`, pushing every chunk its streams give onto `seen`. */
export function recordingLauncher(launcher: Launcher, seen: Buffer[]): Launcher {
  return {
    async launch(spec) {
      const started = await launcher.launch(spec);
      if ("launched" in started) {
        for (const stream of started.launched.streams) stream.on("data", (chunk: Buffer) => seen.push(chunk));
      }
      return started;
    },
  };
}

/** The bytes of `chunks` not freed (a freed chunk's buffer is detached and reads as empty). */
export function unfreedBytes(chunks: readonly Buffer[]): number {
  return chunks.filter((chunk) => chunk.buffer.byteLength > 0).reduce((sum, chunk) => sum + chunk.length, 0);
}
