// The API server's forms for an object's name (IsDNS1123Label, IsDNS1123Subdomain), one copy for
// every schema that checks a name: a Playbook, its placement, its task sources, a policy.

/** A DNS-1123 label: a container's, a volume's or a port's name. */
export const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
/** A DNS-1123 subdomain: most objects' names, a label key's prefix. */
export const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
