package timesync

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// StepThreshold is the smallest offset the clock is stepped by (ntpd's); a smaller one is
// slewed, so time never goes backwards for a small error.
const StepThreshold = 128 * time.Millisecond

// AdjustClock moves the kernel's clock by offset: a step at or above StepThreshold, a slew
// below it (adjtime's, 0.5 ms a second). Then it tells the kernel the clock is synchronized,
// which makes it write the clock to the RTC every 11 minutes: the next boot starts near the
// right time.
func AdjustClock(offset time.Duration) error {
	if offset.Abs() >= StepThreshold {
		ts := unix.NsecToTimespec(time.Now().Add(offset).UnixNano())
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			return fmt.Errorf("stepping the clock: %w", err)
		}
	} else {
		tx := unix.Timex{Modes: unix.ADJ_OFFSET_SINGLESHOT, Offset: offset.Microseconds()}
		if _, err := unix.Adjtimex(&tx); err != nil {
			return fmt.Errorf("slewing the clock: %w", err)
		}
	}

	var tx unix.Timex
	if _, err := unix.Adjtimex(&tx); err != nil {
		return fmt.Errorf("reading the clock's status: %w", err)
	}

	tx = unix.Timex{
		Modes:    unix.ADJ_STATUS | unix.ADJ_MAXERROR | unix.ADJ_ESTERROR,
		Status:   tx.Status &^ unix.STA_UNSYNC,
		Maxerror: 0,
		Esterror: 0,
	}

	if _, err := unix.Adjtimex(&tx); err != nil {
		return fmt.Errorf("marking the clock synchronized: %w", err)
	}

	return nil
}
