// How every command that prints an object (-o json|yaml) prints it: run's final Playbook, and
// submit's, wait's, cancel's and the watch's on a cluster.
import { stringify } from "yaml";

export type ObjectFormat = "json" | "yaml";

/** The object on stdout; scripts print back as they were written (run: |), never folded or wrapped. */
export function printObject(object: unknown, format: ObjectFormat): void {
  process.stdout.write(
    format === "json"
      ? `${JSON.stringify(object, null, 2)}\n`
      : stringify(object, { blockQuote: "literal", lineWidth: 0 }),
  );
}
