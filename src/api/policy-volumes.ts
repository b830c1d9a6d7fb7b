// PlaybookPolicy.allowedVolumes: the volume types a namespace's Playbooks may name (docs/secrets.md).
// Absent: every type a Playbook may name (task-sources.ts VOLUME_TYPES); hostPath is never one.
import { z } from "zod";
import type { PlaybookSpec } from "./playbook.js";
import { VOLUME_TYPES, VOLUME_TYPES_TEXT, volumeType } from "./task-sources.js";

export const AllowedVolumes = z
  .array(z.enum(VOLUME_TYPES, { error: `must be one of ${VOLUME_TYPES_TEXT}` }))
  .max(VOLUME_TYPES.length, `must list at most ${VOLUME_TYPES.length} types`);

interface VolumeRules {
  policy: { name: string } | null;
  allowedVolumes?: readonly string[] | undefined;
}

/** A volume of a type the namespace does not allow, at spec.volumes[i], naming its type and the allowed ones. */
export function checkVolumes(
  spec: PlaybookSpec,
  rules: VolumeRules,
): { path: string; field: "spec.volumes"; message: string }[] {
  const allowed = rules.allowedVolumes ?? VOLUME_TYPES;
  const shown = allowed.length ? allowed.join(", ") : "no volume type";
  return (spec.volumes ?? []).flatMap((volume, index) => {
    const type = volumeType(volume);
    if (allowed.includes(type)) return [];
    return [
      {
        path: `spec.volumes[${index}].${type}`,
        field: "spec.volumes" as const,
        message: `volume ${JSON.stringify(volume.name)} is of type ${type}, which the namespace does not allow: PlaybookPolicy ${rules.policy?.name ?? "default"} allows ${shown} (spec.allowedVolumes)`,
      },
    ];
  });
}
