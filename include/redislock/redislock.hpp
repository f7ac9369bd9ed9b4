#pragma once
/// @file redislock.hpp
/// @brief Umbrella header: everything a program needs to use redislock.

#include <redislock/version.hpp>
#include <redislock/errors.hpp>
#include <redislock/eviction.hpp>
#include <redislock/options.hpp>
#include <redislock/connection.hpp>
#include <redislock/script.hpp>
#include <redislock/stats.hpp>
#include <redislock/watchdog.hpp>
#include <redislock/client.hpp>
#include <redislock/cluster_client.hpp>
#include <redislock/sentinel_client.hpp>
#include <redislock/lock_options.hpp>
#include <redislock/cancel.hpp>
#include <redislock/mutex.hpp>
#include <redislock/reentrant_mutex.hpp>
#include <redislock/shared_mutex.hpp>
#include <redislock/semaphore.hpp>
#include <redislock/latch.hpp>
#include <redislock/election.hpp>
#include <redislock/redlock.hpp>
#include <redislock/with_lock.hpp>
#include <redislock/lock_info.hpp>
#include <redislock/observe.hpp>
