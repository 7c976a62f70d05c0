#pragma once
#include <microhttpd.h>

// Swift cannot call C variadic functions; these fixed-signature wrappers are the only way in.
// The argument types must match what MHD reads with va_arg exactly (unsigned int, size_t, pointers).

typedef size_t (*flare_mhd_unescape_callback)(void *cls, struct MHD_Connection *connection, char *s);

static inline struct MHD_Daemon *flare_mhd_start_daemon(
    unsigned int flags,
    const struct sockaddr *address,
    MHD_AccessHandlerCallback handler,
    MHD_RequestCompletedCallback completed,
    MHD_LogCallback logger,
    flare_mhd_unescape_callback unescape,
    void *cls,
    unsigned int thread_pool_size,
    unsigned int connection_limit,
    unsigned int connection_timeout_seconds,
    size_t connection_memory_limit)
{
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, cls,
                            MHD_OPTION_SOCK_ADDR, address,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, cls,
                            MHD_OPTION_EXTERNAL_LOGGER, logger, cls,
                            MHD_OPTION_UNESCAPE_CALLBACK, unescape, cls,
                            MHD_OPTION_THREAD_POOL_SIZE, thread_pool_size,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, connection_memory_limit,
                            MHD_OPTION_END);
}

static inline uint16_t flare_mhd_bound_port(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

static inline const struct sockaddr *flare_mhd_client_address(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info == NULL ? NULL : info->client_addr;
}
