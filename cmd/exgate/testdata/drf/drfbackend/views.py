"""The order views: a serializer that mirrors the trading API's order
fields (DecimalField for decimals, as a Django backend writes them), an
in-memory store of placed orders, and a record of each placement for the
test to compare with what exgate validated; the bulk view (placement, and
cancel by ids as an array or {"ids": [...]}, POSTed or DELETEd) and the
status and cancel of ids joined by commas in the path, each recording
what it read (and the query string beside it); and the writes exchange
backends have beside them, each recorded: a mass cancel (DELETE of the
order list), an amend (PATCH, PUT of an order), a cancel action and a
withdrawal, and a cancel that also reads ids from a DELETE's body; a
paged listing whose links DRF builds from the request's Host."""

import threading

from rest_framework import serializers, status
from rest_framework.pagination import PageNumberPagination
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

# The market catalogue, in the trading API's format (precisions are
# integers written as strings).
MARKETS = [
    # symbol, name, base, quote, tradable, price, base amount, quote amount precision
    ("BTC_USDT", "Bitcoin/Tether", "BTC", "USDT", True, 2, 6, 2),
    ("ETH_USDT", "Ethereum/Tether", "ETH", "USDT", True, 2, 4, 2),
    ("BTC_IRT", "Bitcoin/Toman", "BTC", "IRT", True, 0, 8, 0),
    ("USDT_IRT", "Tether/Toman", "USDT", "IRT", True, 0, 2, 0),
    ("ETH_BTC", "Ethereum/Bitcoin", "ETH", "BTC", True, 6, 4, 8),
    ("LUNC_USDT", "Terra Classic/Tether", "LUNC", "USDT", False, 8, 2, 4),
]

DECIMAL_FIELDS = ["base_amount", "quote_amount", "price", "stop_price", "oco_target_price"]
FIELDS = ["symbol", "type", "side"] + DECIMAL_FIELDS + ["identifier"]


def decimal_field(required):
    # 20 digits before the point and 30 after: the bounds of the API.
    return serializers.DecimalField(
        max_digits=50, decimal_places=30, required=required, allow_null=not required
    )


class OrderSerializer(serializers.Serializer):
    symbol = serializers.CharField(max_length=32)
    type = serializers.ChoiceField(choices=["limit", "market", "stop_limit", "oco"])
    side = serializers.ChoiceField(choices=["buy", "sell"])
    base_amount = decimal_field(True)
    quote_amount = decimal_field(False)
    price = decimal_field(False)
    stop_price = decimal_field(False)
    oco_target_price = decimal_field(False)
    identifier = serializers.CharField(max_length=256, required=False, allow_null=True)


_lock = threading.Lock()
_placed = []  # every placed order, in order


class OrderView(APIView):
    def delete(self, request, format=None):
        # A mass cancel (?symbol=X), as Binance's DELETE openOrders or
        # djangorestframework-bulk's bulk destroy.
        return _write(request, "mass_cancel")

    def post(self, request, format=None):
        raw = request._request.body  # read before DRF parses it; kept by Django
        s = OrderSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        d = s.validated_data
        fields = {k: (None if d.get(k) is None else str(d[k])) for k in FIELDS if k in d}
        with _lock:
            order_id = len(_placed) + 1
            _placed.append(
                {
                    "id": order_id,
                    "user": str(request.user.id),
                    "request_id": request.META.get("HTTP_X_REQUEST_ID", ""),
                    "content_type": request.META.get("CONTENT_TYPE", ""),
                    "body": raw.decode("latin-1"),
                    "fields": fields,
                }
            )
        out = {"id": order_id, "state": "active"}
        out.update({k: fields.get(k) for k in FIELDS})
        if request.version is not None:  # AcceptHeaderVersioning's, when asked
            out["version"] = request.version
        # The created order's address, as a DRF view that names it does.
        headers = {"Location": f"/api/v1/odr/orders/{order_id}/"}
        return Response(out, status=status.HTTP_201_CREATED, headers=headers)


class IdsSerializer(serializers.Serializer):
    # Order ids as a Django backend reads primary keys.
    ids = serializers.ListField(child=serializers.IntegerField(min_value=1), allow_empty=False)


_bulk = []  # every bulk request and status read the views accepted, in order


def _record(request, raw, kind, ids=None, orders=None):
    with _lock:
        _bulk.append(
            {
                "kind": kind,
                "method": request.method,
                "request_id": request.META.get("HTTP_X_REQUEST_ID", ""),
                "body": raw.decode("latin-1"),
                "ids": ids,
                "orders": orders,
                "query": request.META.get("QUERY_STRING", ""),
            }
        )


class BulkView(APIView):
    """POST: an array of orders places them all (201, {"orders": [...]});
    order ids, as an array or {"ids": [...]}, cancel (200, {"canceled_orders",
    "not_canceled_orders"}). DELETE: ids only."""

    def post(self, request, format=None):
        raw = request._request.body  # read before DRF parses it; kept by Django
        data = request.data
        if isinstance(data, list) and data and isinstance(data[0], dict):
            s = OrderSerializer(data=data, many=True)
            s.is_valid(raise_exception=True)
            orders = [
                {k: (None if d.get(k) is None else str(d[k])) for k in FIELDS if k in d}
                for d in s.validated_data
            ]
            _record(request, raw, "place", orders=orders)
            return Response({"orders": orders}, status=status.HTTP_201_CREATED)
        return self.cancel(request, raw)

    def delete(self, request, format=None):
        return self.cancel(request, request._request.body)

    def cancel(self, request, raw):
        data = request.data
        s = IdsSerializer(data=data if isinstance(data, dict) else {"ids": data})
        s.is_valid(raise_exception=True)
        ids = [str(i) for i in s.validated_data["ids"]]
        _record(request, raw, "cancel", ids=ids)
        return Response({"canceled_orders": ids, "not_canceled_orders": []})


class StatusView(APIView):
    """GET /api/v1/odr/orders/<ids>/: ids joined by commas, read as a
    Django view commonly does (int of each part). DELETE cancels them,
    recording the query string the view could read beside the path."""

    def get(self, request, ids, format=None):
        read = [str(int(i)) for i in ids.split(",")]
        _record(request, b"", "status", ids=read)
        return Response([{"id": int(i), "state": "active"} for i in read])

    def delete(self, request, ids, format=None):
        # DRF parses a DELETE's body as a POST's: a view that also reads
        # {"ids": [...]} from it cancels those (a mass cancel).
        raw = request._request.body
        read = [str(int(i)) for i in ids.split(",")]
        data = request.data
        if isinstance(data, dict):
            read += [str(int(i)) for i in data.get("ids", [])]
        _record(request, raw, "cancel_path", ids=read)
        return Response([{"id": int(i), "state": "canceled"} for i in read])

    def patch(self, request, ids, format=None):
        return _write(request, "amend")

    def put(self, request, ids, format=None):
        return _write(request, "amend")


def _write(request, kind):
    """Records a write exgate has no check for (an amend, a mass cancel, a
    cancel action, a withdrawal) and answers it done."""
    _record(request, request._request.body, kind)
    return Response({"done": kind})


class WriteView(APIView):
    """The writes a real exchange backend has beside the order family
    (a cancel action, a withdrawal): each recorded."""

    kind = "write"

    def post(self, request, format=None, **kwargs):
        return _write(request, self.kind)

    def put(self, request, format=None, **kwargs):
        return _write(request, self.kind)

    def patch(self, request, format=None, **kwargs):
        return _write(request, self.kind)

    def delete(self, request, format=None, **kwargs):
        return _write(request, self.kind)


class FillsView(APIView):
    """GET /api/v1/odr/fills/: answers how Django read the query string
    (QueryDict: "&" separates, the last value of a name is
    request.GET[name], a malformed escape is kept as written)."""

    def get(self, request, format=None):
        q = request.query_params
        return Response(
            {
                "query": request.META.get("QUERY_STRING", ""),
                "lists": {k: q.getlist(k) for k in q},
                "symbol": q.get("symbol"),
            }
        )


class HistoryPagination(PageNumberPagination):
    page_size = 2


class HistoryView(APIView):
    """GET /api/v1/odr/history/: a listing paged by DRF's
    PageNumberPagination, whose next and previous links are absolute
    URLs built from the Host the view saw (request.build_absolute_uri)."""

    def get(self, request, format=None):
        pager = HistoryPagination()
        page = pager.paginate_queryset([{"id": i} for i in range(1, 6)], request, view=self)
        return pager.get_paginated_response(page)


class BulkRecordView(APIView):
    """What the test reads back: every bulk request and status read."""

    authentication_classes = []
    permission_classes = [AllowAny]

    def get(self, request, format=None):
        with _lock:
            return Response(list(_bulk))


class MarketsView(APIView):
    authentication_classes = []
    permission_classes = [AllowAny]

    def get(self, request, format=None):
        return Response(
            [
                {
                    "symbol": m[0],
                    "name": m[1],
                    "base": m[2],
                    "quote": m[3],
                    "tradable": m[4],
                    "price_precision": str(m[5]),
                    "base_amount_precision": str(m[6]),
                    "quote_amount_precision": str(m[7]),
                }
                for m in MARKETS
            ]
        )


class PlacedView(APIView):
    """What the test reads back: every placement, as recorded."""

    authentication_classes = []
    permission_classes = [AllowAny]

    def get(self, request, format=None):
        with _lock:
            return Response(list(_placed))
