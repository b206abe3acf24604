/*
 * netif.h - the sandbox's network namespace: interfaces up, and routes that keep the host's own
 * addresses out of reach (policy/netif.c).
 *
 * Called by the local jail (policy/jail.c) for a sandbox's network namespace, before it drops
 * its capabilities. A file of its own because <sys/socket.h> and the jail's bind() helper
 * cannot share a translation unit.
 */
#ifndef KG_NETIF_H
#define KG_NETIF_H

/* netif_up - set IFF_UP on the named interface; 0 or a negative errno (needs CAP_NET_ADMIN
 * over the current network namespace) */
int netif_up(const char *name);

#include <stddef.h>
#include <stdint.h>
#include "policy/limits.h"

/* netif_host_addrs - the IPv4 addresses of the current (the host's) network namespace, in
 * network byte order, loopback ones left out; how many (at most max) or a negative errno */
int netif_host_addrs(uint32_t *out, size_t max);

/* netif_unreachable - a route that makes addr/prefix (IPv4, network byte order) unreachable in
 * the current network namespace ("no route to host"); 0 or a negative errno (CAP_NET_ADMIN) */
int netif_unreachable(uint32_t addr, unsigned prefix);

#endif
