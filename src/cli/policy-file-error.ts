// The error of a --policy file that cannot be used (policy-file.ts), apart so that program.ts can
// tell it from others without loading the policy's module.
export class InvalidPolicyFileError extends Error {}
