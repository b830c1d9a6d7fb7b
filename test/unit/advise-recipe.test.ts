// The `playbook advise` recipe in README.md and docs/advise.md is run from the checkout: what it
// writes (the runs, the patch) goes to a folder of mktemp's, so it leaves nothing in the checkout.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "../..");

/** The shell blocks of a Markdown file that run `playbook advise`. */
function adviseBlocks(file: string): string[] {
  const text = readFileSync(join(ROOT, file), "utf8");
  return [...text.matchAll(/```sh\n([\s\S]*?)```/g)]
    .map((match) => match[1] ?? "")
    .filter((block) => block.includes("./playbook advise"));
}

describe.each(["README.md", "docs/advise.md"])("the advise recipe in %s", (file) => {
  const blocks = adviseBlocks(file);

  it("is there", () => {
    expect(blocks.length).toBeGreaterThan(0);
  });

  it("writes only into a folder of mktemp's, never into the checkout", () => {
    for (const block of blocks) {
      expect(block).toMatch(/^dir=\$\(mktemp -d\)/);
      // Every file it writes (> FILE) and every folder it makes is under "$dir".
      const written = [...block.matchAll(/(?:>|mkdir(?: -p)?)\s+(\S+)/g)].map((match) => match[1]);
      expect(written.length).toBeGreaterThan(0);
      for (const target of written) expect(target).toMatch(/^"\$dir\//);
    }
  });
});
