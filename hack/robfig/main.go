// Command robfig answers, for cron expressions, what the Kubernetes CronJob controller's
// parser (robfig/cron v3, cron.ParseStandard, the version k8s.io/kubernetes requires)
// makes of them: accepted or not, and the next times after a given instant in a given
// time zone. Sundial's cron parity test compares its own slot maths with these answers.
//
// Input on stdin, one JSON object per line: {"expr": "...", "zone": "...", "after":
// "RFC3339", "count": N}. Output, one JSON object per line: {"expr", "error", "next"}.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/robfig/cron/v3"
)

type query struct {
	Expr  string `json:"expr"`
	Zone  string `json:"zone"`
	After string `json:"after"`
	Count int    `json:"count"`
}

type answer struct {
	Expr  string   `json:"expr"`
	Error string   `json:"error,omitempty"`
	Next  []string `json:"next"`
}

func main() {
	scanner := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for scanner.Scan() {
		var q query
		if err := json.Unmarshal(scanner.Bytes(), &q); err != nil {
			fmt.Fprintln(os.Stderr, "bad query:", err)
			os.Exit(2)
		}
		a := answer{Expr: q.Expr, Next: []string{}}
		// The CronJob controller's own form of a time zone (spec.timeZone).
		schedule, err := cron.ParseStandard(fmt.Sprintf("TZ=%s %s", q.Zone, q.Expr))
		if err != nil {
			a.Error = err.Error()
		} else {
			after, err := time.Parse(time.RFC3339, q.After)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bad time:", err)
				os.Exit(2)
			}
			t := after
			for i := 0; i < q.Count; i++ {
				t = schedule.Next(t)
				if t.IsZero() {
					break
				}
				a.Next = append(a.Next, t.UTC().Format(time.RFC3339))
			}
		}
		if err := out.Encode(a); err != nil {
			os.Exit(1)
		}
	}
}
