/*
 * log.h - the one logging module every process links.
 *
 * Lines go to stderr (never stdout: in stdio mode stdout carries MCP messages only) as
 *   2026-11-30T13:45:01.123Z info  master[1234] session_start: message
 * The level is set once per process from --log-level; workers and agents inherit stderr.
 * Never pass a token, key or secret to these functions.
 */
#ifndef KG_LOG_H
#define KG_LOG_H

enum log_level { LOG_LVL_DEBUG, LOG_LVL_INFO, LOG_LVL_WARN, LOG_LVL_ERROR, LOG_LVL_OFF };

void log_init(const char *role, enum log_level level);
int log_parse_level(const char *name, enum log_level *out);
enum log_level log_get_level(void);
void log_msg(enum log_level lvl, const char *func, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_debug(...) log_msg(LOG_LVL_DEBUG, __func__, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_LVL_INFO, __func__, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_LVL_WARN, __func__, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LVL_ERROR, __func__, __VA_ARGS__)

#endif
