/*
 * netif.h - bring a network interface up (policy/netif.c).
 *
 * Called by the local jail (policy/jail.c) for the loopback of a sandbox that has a network
 * namespace of its own (--sandbox-network none), before it drops its capabilities. A file of
 * its own because <sys/socket.h> and the jail's bind() helper cannot share a translation unit.
 */
#ifndef KG_NETIF_H
#define KG_NETIF_H

/* netif_up - set IFF_UP on the named interface; 0 or a negative errno (needs CAP_NET_ADMIN
 * over the current network namespace) */
int netif_up(const char *name);

#endif
