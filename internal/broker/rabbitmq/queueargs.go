package rabbitmq

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// QueueArgs are the declared arguments of a queue that decide whether
// RabbitMQ drops a message: its type, its delivery limit and its
// dead-letter exchange. Policies are not in them: AMQP cannot read a
// policy, only the management plugin can.
type QueueArgs struct {
	// Type is x-queue-type ("quorum", "classic", "stream"); "" when the
	// queue was declared without it, which is a classic queue unless the
	// vhost's default queue type says otherwise.
	Type string
	// HasDeliveryLimit says x-delivery-limit is set; DeliveryLimit is it.
	HasDeliveryLimit bool
	DeliveryLimit    int64
	// DeadLetterExchange is x-dead-letter-exchange ("" is the default
	// exchange); HasDeadLetterExchange says it is set.
	HasDeadLetterExchange bool
	DeadLetterExchange    string
}

// The keys ReadQueueArgs learns, and for each a sentinel of a type
// RabbitMQ refuses for that key: it never equals what a queue holds (so
// the declare always fails and reveals the current value), and a declare
// that carries it can never create a queue.
var probeSentinels = map[string]any{
	"x-queue-type":           int64(0),
	"x-delivery-limit":       "dedupe-proxy-probe",
	"x-dead-letter-exchange": int64(0),
}

// RabbitMQ's refusal of an inequivalent declare, in its three forms:
// "current is none", "current is the value 'V' of type 'T'" (the client
// sent no such argument) and "current is 'V'" (both have one: the
// sentinels, and the durable and auto_delete flags).
var inequivalent = regexp.MustCompile(`inequivalent arg '([^']+)' for .*: received .* but current is (none|the value '(.*)' of type '(\w+)'|'(.*)')$`)

// ReadQueueArgs reads a queue's type, delivery limit and dead-letter
// exchange over AMQP, which has no call for a queue's arguments: a
// passive declare returns only counts. It declares the queue (not
// passively) with arguments that cannot match, and RabbitMQ's refusal
// names the first inequivalent argument and its current value. Learnt
// values replace the sentinels until all three keys are known (a queue
// type without a delivery limit accepts the declare once the other two
// are). Every declare carries a sentinel of a type RabbitMQ refuses, so
// none can create the queue if it was deleted meanwhile, nor change one.
// It needs the configure permission on the queue; each refused declare
// closes its channel, so each attempt has its own.
func ReadQueueArgs(conn *amqp.Connection, queue string) (QueueArgs, error) {
	var out QueueArgs
	args := amqp.Table{}
	for k, v := range probeSentinels {
		args[k] = v
	}
	learnt := map[string]bool{}
	durable, autoDelete := true, false
	for range 40 {
		err := declareOnce(conn, queue, durable, autoDelete, args)
		if err == nil {
			// The queue exists and the server did not compare a key still
			// holding its sentinel: RabbitMQ compares x-delivery-limit only
			// for the queue types that have one.
			if learnt["x-queue-type"] && learnt["x-dead-letter-exchange"] && out.Type != "quorum" {
				return out, nil
			}
			return out, errors.New("the server did not compare the arguments this reads; they cannot be read over AMQP")
		}
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			return out, err
		}
		m := inequivalent.FindStringSubmatch(ae.Reason)
		if m == nil {
			return out, err
		}
		key, none, raw, typ := m[1], m[2] == "none", m[3], m[4]
		if typ == "" && !none {
			// Untyped: only a key whose type this code knows gets here.
			raw = m[5]
			switch key {
			case "durable":
				durable = raw == "true"
				continue
			case "auto_delete":
				autoDelete = raw == "true"
				continue
			case "x-delivery-limit":
				typ = "long"
			default:
				typ = "longstr"
			}
		}
		var val any
		if !none {
			if val, err = fromReason(raw, typ); err != nil {
				return out, fmt.Errorf("argument %s: %w", key, err)
			}
		}
		if _, target := probeSentinels[key]; target {
			if learnt[key] {
				return out, fmt.Errorf("argument %s reported twice: %s", key, ae.Reason)
			}
			if err := out.set(key, val); err != nil {
				return out, err
			}
			learnt[key] = true
			if len(learnt) == len(probeSentinels) {
				return out, nil
			}
		}
		if none {
			delete(args, key)
		} else {
			args[key] = val
		}
	}
	return out, errors.New("too many arguments to read")
}

func declareOnce(conn *amqp.Connection, queue string, durable, autoDelete bool, args amqp.Table) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDeclare(queue, durable, autoDelete, false, false, args)
	return err
}

func (a *QueueArgs) set(key string, val any) error {
	switch key {
	case "x-queue-type":
		if val != nil {
			s, ok := val.(string)
			if !ok {
				return fmt.Errorf("x-queue-type is %v, not a string", val)
			}
			a.Type = s
		}
	case "x-delivery-limit":
		if val != nil {
			n, ok := val.(int64)
			if !ok {
				return fmt.Errorf("x-delivery-limit is %v, not a number", val)
			}
			a.HasDeliveryLimit, a.DeliveryLimit = true, n
		}
	case "x-dead-letter-exchange":
		if val != nil {
			s, ok := val.(string)
			if !ok {
				return fmt.Errorf("x-dead-letter-exchange is %v, not a string", val)
			}
			a.HasDeadLetterExchange, a.DeadLetterExchange = true, s
		}
	}
	return nil
}

// fromReason turns a value as RabbitMQ prints it in a refusal back into
// one that compares equal: RabbitMQ treats the integer types as one.
func fromReason(raw, typ string) (any, error) {
	switch typ {
	case "longstr", "shortstr":
		return raw, nil
	case "long", "signedint", "short", "byte", "unsignedbyte", "unsignedshort", "unsignedint":
		return strconv.ParseInt(raw, 10, 64)
	case "bool":
		return strconv.ParseBool(raw)
	}
	return nil, fmt.Errorf("value %q of type %s cannot be read back", raw, typ)
}

// DeliveryLimitRisk says whether RabbitMQ may drop a message of this
// queue past its delivery limit: a quorum queue with a limit (declared, or
// RabbitMQ 4.x's default of 20) and no dead-letter exchange in its
// arguments. finding says what was found and what could not be checked;
// version is the server's (the connection's "version" property).
func (a QueueArgs) DeliveryLimitRisk(version string) (risk bool, finding string) {
	const policies = "; a policy may set delivery-limit or dead-letter-exchange too, which AMQP cannot read (rabbitmqctl list_queues name arguments policy effective_policy_definition shows them)"
	if a.Type != "quorum" {
		t := a.Type
		if t == "" {
			t = "classic (no x-queue-type argument)"
		}
		return false, fmt.Sprintf("queue type %s: no delivery limit", t)
	}
	v4 := majorVersion(version) >= 4
	var limit string
	switch {
	case a.HasDeliveryLimit && a.DeliveryLimit < 0:
		limit = fmt.Sprintf("x-delivery-limit %d (no limit)", a.DeliveryLimit)
	case a.HasDeliveryLimit:
		limit = fmt.Sprintf("x-delivery-limit %d", a.DeliveryLimit)
	case v4:
		limit = "no x-delivery-limit argument, so RabbitMQ " + version + "'s default limit of 20"
	default:
		limit = "no x-delivery-limit argument (RabbitMQ " + version + " sets none by default; 4.x sets 20)"
	}
	if a.HasDeadLetterExchange {
		return false, fmt.Sprintf("quorum queue, %s, dead-letter exchange %q: a message past the limit is dead-lettered there", limit, a.DeadLetterExchange)
	}
	limited := (a.HasDeliveryLimit && a.DeliveryLimit >= 0) || (!a.HasDeliveryLimit && v4)
	if !limited {
		return false, "quorum queue, " + limit + ", no x-dead-letter-exchange argument" + policies
	}
	return true, "quorum queue, " + limit + ", and no x-dead-letter-exchange argument: RabbitMQ drops a message past its delivery limit (every requeue counts); set a dead-letter exchange" + policies
}

func majorVersion(v string) int {
	major, _, _ := strings.Cut(v, ".")
	n, _ := strconv.Atoi(major)
	return n
}
