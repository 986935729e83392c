"""Recurring events: cron and interval schedules whose ticks are ordinary delayed events."""
